"""`--block-complexity auto`: the device's cost curve and the per-method budget choice."""
