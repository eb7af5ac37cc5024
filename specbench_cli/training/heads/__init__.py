"""Training draft heads on the frozen target's features (Medusa, EAGLE, KOALA adversarial)."""
