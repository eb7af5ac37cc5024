"""Targets: short name -> "module:Class" (a `specbench_cli.engine.target.Target` subclass), what
computes the forwards a decoding loop verifies drafts with.

The built-in target, `hf`, is transformers' module (engine/targets/hf.py); other packages add
targets (an inference engine, a quantised runtime, a model sharded over several GPUs) through the
`specbench.targets` entry-point group (see `specbench_cli/registry.py` and docs/adding-a-method.md,
"A new target"). Nothing is imported until a name is used: a target's module may import its
runtime.
"""

from __future__ import annotations

from specbench_cli.registry import Registry

_REGISTRY = Registry("target", "specbench.targets", "specbench_cli.engine.target:Target", {
    "hf": "specbench_cli.engine.targets.hf:HFTarget",
    "llama.cpp": "specbench_cli.engine.targets.llama_cpp:LlamaCppTarget",
    "zero-cost": "specbench_cli.engine.targets.zero_cost:ZeroCostTarget",
})
REGISTRY = _REGISTRY.entries  # name -> "module:Class" (mutable: tests add entries)
DEFAULT = "hf"
DESCRIBED = {"capabilities": frozenset()}

names = _REGISTRY.names
get = _REGISTRY.get
register = _REGISTRY.register


def describe(name: str) -> dict:
    """The capabilities a target declares (engine/target.py `CAPABILITIES`)."""
    return _REGISTRY.describe(name, DESCRIBED)
