"""What every method is built on, not methods themselves: the method contract (`method.py`) and
the shapes of static draft trees (`tree_shapes.py`)."""
