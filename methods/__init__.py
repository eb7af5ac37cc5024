"""Methods: short name -> "module:Class" (a `specbench_cli.methods.core.method.Method` subclass).

Built-ins are listed here in the order `specbench list methods` shows them (the head methods,
one per head kind, come from the head-kind registry, methods/heads/kinds/); other packages add
methods through the `specbench.methods` entry-point group (see `specbench_cli/registry.py`).
Modules are imported on first use only.
"""

from __future__ import annotations

from specbench_cli.methods.heads.kinds import REGISTRY as HEAD_KINDS
from specbench_cli.names import AR
from specbench_cli.registry import Registry

_REGISTRY = Registry("method", "specbench.methods", "specbench_cli.methods.core.method:Method", {
    AR: "specbench_cli.methods.ar:AutoRegressive",
    "pld": "specbench_cli.methods.pld:PromptLookup",
    "jacobi": "specbench_cli.methods.jacobi:Jacobi",
    "lookahead": "specbench_cli.methods.lookahead:Lookahead",
    "tr-jacobi": "specbench_cli.methods.tr_jacobi:TRJacobi",
    "mask-probe": "specbench_cli.methods.mask_probe:MaskProbe",
    "recycling": "specbench_cli.methods.recycling:TokenRecycling",
    "samd": "specbench_cli.methods.samd:SAMDecoding",
    "suffix": "specbench_cli.methods.suffix:SuffixDecoding",
    "rest": "specbench_cli.methods.rest:REST",
    "sps": "specbench_cli.methods.sps:SpeculativeSampling",
    "space": "specbench_cli.methods.space:Space",
    "pard": "specbench_cli.methods.pard:Pard",
    "synthetic": "specbench_cli.methods.synthetic:Synthetic",
    **{kind: registration.method for kind, registration in HEAD_KINDS.items()},
    "fastcot": "specbench_cli.methods.fastcot:FastCoT",
    "cot": "specbench_cli.methods.fastcot:CoT",
})
REGISTRY = _REGISTRY.entries  # name -> "module:Class" (mutable: tests add entries)
DESCRIBED = {"summary": "", "lossless": True, "needs_training": False}

names = _REGISTRY.names
get = _REGISTRY.get
register = _REGISTRY.register


def describe(name: str) -> dict:
    """summary / lossless / needs_training of a method, without importing it when possible."""
    return _REGISTRY.describe(name, DESCRIBED)
