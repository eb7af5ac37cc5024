"""Targets: short name -> "module:Class" (a `specbench_cli.decoding.target.Target` subclass), what
computes the forwards a decoding loop verifies drafts with.

The built-in target, `hf`, is transformers' module (targets/hf/target.py); other packages add
targets (an inference engine, a quantised runtime, a model sharded over several GPUs) through the
`specbench.targets` entry-point group (see `specbench_cli/registry.py` and docs/adding-a-method.md,
"A new target"). Nothing is imported until a name is used: a target's module may import its
runtime.
"""

from __future__ import annotations

from typing import Any

from specbench_cli.registry import Registry

_REGISTRY = Registry("target", "specbench.targets", "specbench_cli.decoding.target:Target", {
    "hf": "specbench_cli.targets.hf.target:HFTarget",
    "llama.cpp": "specbench_cli.targets.llama_cpp.target:LlamaCppTarget",
    "zero-cost": "specbench_cli.targets.zero_cost:ZeroCostTarget",
})
REGISTRY = _REGISTRY.entries  # name -> "module:Class" (mutable: tests add entries)
DEFAULT = "hf"
DESCRIBED = {"capabilities": frozenset()}

names = _REGISTRY.names
get = _REGISTRY.get
register = _REGISTRY.register


def describe(name: str) -> dict:
    """The capabilities a target declares (decoding/target.py `CAPABILITIES`)."""
    return _REGISTRY.describe(name, DESCRIBED)


def as_target(model_or_target: Any) -> Any:
    """A `Target` as given, or a transformers model wrapped in an `HFTarget`: the one place a bare
    model becomes a target (the cost curve, a method's context and its heads accept either; the
    decoder takes a `Target`, so scripts and tests wrap their models here). transformers is
    imported only for a bare model."""
    from specbench_cli.decoding.target import Target

    if isinstance(model_or_target, Target):
        return model_or_target
    from specbench_cli.targets.hf.target import HFTarget

    return HFTarget(model_or_target)
