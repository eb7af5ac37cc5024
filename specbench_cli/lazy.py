"""Deferred imports for the modules that `specbench run` imports only to *plan* its methods.

Planning (parsing and checking every method's options before any model loads) imports each
selected method's module, and through it the engine. Importing torch costs 3-6 s here, which
would make `specbench run -o pld.max_ngrm=4` take that long to print one line. So those modules
write `from specbench_cli.lazy import torch` and touch torch only inside functions: the real
import happens on first attribute access (the first tensor op), never while planning.
Annotations are strings (`from __future__ import annotations`), so they cost nothing.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable


class LazyModule:
    """Stands in for a module until an attribute is read; then imports it (once) and forwards."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Any = None

    def __getattr__(self, attr: str) -> Any:
        # only attributes not set in __init__ land here; the engine reads `torch.x` every step,
        # so the module is imported once and kept, not looked up again on each access
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


torch: Any = LazyModule("torch")


def inference_mode(fn: Callable) -> Callable:
    """`@torch.inference_mode()` without importing torch when the decorated class is defined."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import torch as _torch

        with _torch.inference_mode():
            return fn(*args, **kwargs)

    return wrapper
