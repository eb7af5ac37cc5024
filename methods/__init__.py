"""Lazy registry of methods: short name -> "module:Class". Modules are imported on first use,
so `specbench list methods` and option errors don't pay for importing every method."""

from __future__ import annotations

import importlib

from specbench_cli.errors import unknown

REGISTRY: dict[str, str] = {
    "ar": "specbench_cli.methods.ar:AutoRegressive",
    "pld": "specbench_cli.methods.pld:PromptLookup",
    "jacobi": "specbench_cli.methods.jacobi:Jacobi",
    "lookahead": "specbench_cli.methods.lookahead:Lookahead",
    "tr-jacobi": "specbench_cli.methods.tr_jacobi:TRJacobi",
    "mask-probe": "specbench_cli.methods.mask_probe:MaskProbe",
    "sps": "specbench_cli.methods.sps:SpeculativeSampling",
}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str):
    """The method class registered as `name`; UsageError with a suggestion for unknown names."""
    if name not in REGISTRY:
        raise unknown("method", name, REGISTRY)
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def register(name: str, target: str) -> None:
    """Add a method at run time (plugins, tests): `target` is "module:Class"."""
    REGISTRY[name] = target
