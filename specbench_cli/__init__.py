"""specbench: speculative-decoding methods side by side on Spec-Bench-style suites."""

__version__ = "0.1.0"
