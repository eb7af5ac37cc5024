"""Autoregressive decoding: the baseline. Proposes nothing, so every step verifies only the
root and yields exactly one token."""

from specbench_cli.engine.drafter import Structure
from specbench_cli.methods.core.method import Method


class AutoRegressive(Method):
    name = "ar"
    summary = "autoregressive baseline: one token per forward"
    structure = Structure.NONE
