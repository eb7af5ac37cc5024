"""Targets: what computes the forwards (engine/target.py). `hf`: a transformers model."""
