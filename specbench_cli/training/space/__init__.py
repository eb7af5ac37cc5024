"""SPACE: semi-autoregressive fine-tuning of a target with [MASK] tokens (`specbench train space`)."""
