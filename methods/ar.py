"""Autoregressive decoding: the baseline. Proposes nothing, so every step verifies only the
root and yields exactly one token."""

from specbench_cli.decoding.drafter import Structure
from specbench_cli.methods.core.method import Method
from specbench_cli.names import AR


class AutoRegressive(Method):
    name = AR
    summary = "autoregressive baseline: one token per forward"
    structure = Structure.NONE
