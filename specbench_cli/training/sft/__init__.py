"""Supervised fine-tuning of the target, with and without Make-Some-Noise (MSN)."""
