"""Targets: what computes the forwards (engine/target.py). `hf`: a transformers model."""

from __future__ import annotations

from typing import Any


def as_target(model_or_target: Any) -> Any:
    """A `Target` as given, or a transformers model wrapped in an `HFTarget`: the one place a bare
    model becomes a target (the loop, the cost curve, a method's context and its heads accept
    either). transformers is imported only for a bare model."""
    from specbench_cli.engine.target import Target

    if isinstance(model_or_target, Target):
        return model_or_target
    from specbench_cli.engine.targets.hf import HFTarget

    return HFTarget(model_or_target)
