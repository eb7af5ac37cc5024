"""One drafter per sequence of a batch, without N copies of anything heavy.

A method's drafting state (n-gram indexes, a head's KV cache and per-prompt vocabulary, a draft
model's cache, random streams) lives on the method object, so a batch of N sequences needs N
objects. Planning and binding N times would load N copies of a draft model or of trained heads,
so the copies are made from the bound method instead, with `copy.deepcopy` told to *share*:

- the target model (every module and tensor of it) and the tokenizer;
- every tensor the method holds (weights of heads or a draft model, embedding statistics):
  set up once in `bind`, read-only while decoding;

and to copy everything else: Python state, containers, random streams, and module *objects*
(a head's module may set per-prompt attributes, e.g. its draft vocabulary), whose parameters
stay shared. Copies are made right after binding, before the first generation, so no state of
a generation is carried over. A method that cannot be copied this way (it holds an object that
refuses to be copied, e.g. a compiled library's reader) is planned and bound again instead.

A copy keeps its state from question to question as the one instance of a batch-1 run does:
sequence slot i of every batch is drafted by copy i (method docs note where that matters, e.g.
recycling's `hot` matrix).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable


def _shared(method: Any, target: Any, tokenizer: Any) -> dict[int, Any]:
    """deepcopy's memo: id -> the object itself, for what copies share (module doc): the target
    (decoding/target.py) and, where it wraps a module, that module's submodules and tensors."""
    import torch

    memo: dict[int, Any] = {}
    if target is not None:
        memo[id(target)] = target
    model = getattr(target, "model", None)
    if model is not None and hasattr(model, "modules"):
        for m in model.modules():
            memo[id(m)] = m
        for t in [*model.parameters(), *model.buffers()]:
            memo[id(t)] = t
    if tokenizer is not None:
        memo[id(tokenizer)] = tokenizer
    seen: set[int] = set()
    stack = [method]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or id(obj) in memo:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            memo[id(obj)] = obj
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, (str, bytes, int, float, bool, type(None), type)):
            continue
        else:
            stack.extend(getattr(obj, "__dict__", {}).values())
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return memo


def copy_drafter(method: Any) -> Any:
    """A copy of a bound method that shares its weights and the target (module doc), or None
    when the method holds something that cannot be copied."""
    ctx = getattr(method, "ctx", None)
    memo = _shared(method, getattr(ctx, "target", None), getattr(ctx, "tokenizer", None))
    try:
        return copy.deepcopy(method, memo)
    except Exception:  # noqa: BLE001 - any refusal to copy means: plan and bind a fresh one
        return None


def replicas(method: Any, n: int, fresh: Callable[[], Any]) -> list[Any]:
    """`n` drafters for the `n` sequence slots of a batch: `method` itself, then copies of it
    (or, for a method that cannot be copied, fresh instances from `fresh()`)."""
    out = [method]
    while len(out) < n:
        twin = copy_drafter(method)
        if twin is None:
            twin = fresh()
            adaptive = getattr(getattr(method, "ctx", None), "adaptive", None)
            if adaptive is not None:  # the frozen policy, own answer counts (a copy has its own copy)
                twin.ctx = dataclasses.replace(twin.ctx, adaptive=adaptive.fork())
        out.append(twin)
    return out
