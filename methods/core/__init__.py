"""What every method is built on, not methods themselves: the method contract (`method.py`),
the shapes of static draft trees (`tree_shapes.py`) and the model drafter a retrieval method
falls back to (`fallback.py`)."""
