"""The shapes of static draft trees: lists of rank paths (`[[0], [1], [0, 0], ...]`: node = the
r-th best token at each depth below its parent), the published ones by name, files of them, the
default Medusa shape, and what a shape fixes under a budget (`kept_paths`, `static_plan`). Pure
data and arithmetic: the trees' tokens come from the drafters (methods/heads/draft_trees.py for
the heads, methods/recycling.py).

- `mc_sim_7b_63` (Medusa's `medusa_choices.py`, what Spec-Bench runs for Medusa): 63 paths, 64
  tokens per forward with the root, depth <= 4.
- `vicuna_7b_stage2` (Medusa's `medusa_choices.py`, the tree tuned for Medusa-2 Vicuna-7B heads):
  63 paths, 64 tokens per forward, depth <= 4.
- `eagle1_25` (EAGLE-1's `choices.py`, there also called `mc_sim_7b_63`): 25 paths, depth <= 5.

These lists are the published trees' data, reproduced so Spec-Bench's settings can be run.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

from specbench_cli.errors import UsageError, check_not_special
from specbench_cli.jsonl import loads

MC_SIM_7B_63 = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5], [0, 0, 1],
    [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0],
    [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6],
    [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2],
    [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1],
    [1, 6], [0, 7, 0]]

EAGLE1_25 = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [0, 0, 0], [0, 0, 1],
    [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2],
    [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]

VICUNA_7B_STAGE2 = [
    [0], [0, 0], [1], [0, 1], [0, 0, 0], [1, 0], [2], [0, 2], [0, 0, 1], [0, 3], [3], [0, 1, 0], [2, 0], [4],
    [0, 0, 2], [0, 4], [1, 1], [1, 0, 0], [0, 0, 0, 0], [5], [0, 0, 3], [0, 5], [0, 2, 0], [3, 0], [0, 1, 1],
    [0, 6], [6], [0, 7], [0, 0, 4], [4, 0], [1, 2], [0, 8], [7], [0, 3, 0], [0, 0, 0, 1], [0, 0, 5], [2, 1],
    [0, 0, 6], [1, 0, 1], [0, 0, 1, 0], [2, 0, 0], [5, 0], [0, 9], [0, 1, 2], [8], [0, 4, 0], [0, 2, 1], [1, 3],
    [0, 0, 7], [0, 0, 0, 2], [0, 0, 8], [1, 1, 0], [0, 1, 0, 0], [6, 0], [9], [0, 1, 3], [0, 0, 0, 3], [1, 0, 2],
    [0, 5, 0], [3, 1], [0, 0, 2, 0], [7, 0], [1, 4]]

NAMED = {"mc_sim_7b_63": MC_SIM_7B_63, "vicuna_7b_stage2": VICUNA_7B_STAGE2, "eagle1_25": EAGLE1_25}


def read_paths(value: str, option: str) -> list[list[int]]:
    """A named tree or a JSON file of rank paths, in its own order (best first), prefix-closed."""
    if value in NAMED:
        return [list(p) for p in NAMED[value]]
    p = check_not_special(value, f"{option}:")
    try:
        if p.stat().st_size > 16 << 20:  # 4096 paths of ranks fit in far less
            raise UsageError(f"{option}: {p} is larger than a tree file can be (16 MB)")
        doc = loads(p.read_text(encoding="utf-8"), f"{option}: {p}")
    except FileNotFoundError:
        raise UsageError(f"{option}: '{value}' is neither a known tree ({', '.join(NAMED)}) nor a file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{option}: {p} is not a JSON file: {exc}") from None
    if not isinstance(doc, list) or not doc or not all(
            isinstance(x, list) and x and all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 4096 for r in x)
            for x in doc) or len(doc) > 4096:
        raise UsageError(f"{option}: {p} must be a JSON list (at most 4096) of non-empty lists of ranks 0..4095")
    have = {tuple(x) for x in doc}
    for x in doc:
        if len(x) > 1 and tuple(x[:-1]) not in have:
            raise UsageError(f"{option}: {p}: path {x} has no parent {x[:-1]} in the file")
    return [list(x) for x in dict.fromkeys(tuple(x) for x in doc)]


def default_medusa_paths(heads: int, width: int = 10, decay: float = 0.5,
                         accuracy: tuple[float, ...] = (0.56, 0.32, 0.20, 0.15, 0.12),
                         limit: int = 64) -> list[list[int]]:
    """The `limit` best top-k paths by a prior acceptance estimate: prod over depth d of
    acc_d(rank r) ~ accuracy[d] * decay ** r (Medusa's Vicuna-7B head-1..5 top-1 accuracies,
    our choice of geometric decay over ranks). Prefix-closed, best first.

    Best-first search: a popped path offers its first child and its next sibling, both scored
    lower than itself, so the output is exactly the top `limit` and costs O(limit log limit)
    whatever `width` is (a tree never holds more than BC - 1 paths)."""
    def acc(d: int) -> float:
        return accuracy[min(d, len(accuracy) - 1)]

    if heads < 1 or width < 1 or limit < 1:
        return []
    heap = [(-acc(0), (0,))]
    out: list[list[int]] = []
    while heap and len(out) < limit:
        neg, path = heapq.heappop(heap)
        out.append(list(path))
        if len(path) < heads:
            heapq.heappush(heap, (neg * acc(len(path)), path + (0,)))
        if path[-1] + 1 < width:
            heapq.heappush(heap, (neg * decay, path[:-1] + (path[-1] + 1,)))
    return out


def kept_paths(paths: list[list[int]], budget: int, max_depth: int) -> list[tuple[int, ...]]:
    """The first `budget` paths (in the given order, best first) whose parents are kept and whose
    depth is at most `max_depth`: the static tree one forward of BC = budget + 1 verifies."""
    kept: list[tuple[int, ...]] = []
    have: set[tuple[int, ...]] = set()
    for p in paths:
        key = tuple(p)
        if len(kept) >= budget:
            break
        if key and len(key) <= max_depth and key not in have and (len(key) == 1 or key[:-1] in have):
            kept.append(key)
            have.add(key)
    return kept


@dataclass(frozen=True)
class StaticPlan:
    """What a static tree's shape fixes, computed once per (paths, budget, depth) rather than at
    every decoding step: per depth the kept paths in order (`levels`) and grouped by parent in
    order of first appearance (`groups`), the kept paths that have kept children (`inner`), and the
    highest rank any path asks for + 1 (`max_rank`)."""

    levels: tuple[tuple[tuple[int, ...], ...], ...]
    groups: tuple[tuple[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], ...], ...]
    inner: frozenset
    max_rank: int


def static_plan(paths, budget: int, max_depth: int) -> StaticPlan:
    """The `StaticPlan` of `kept_paths(paths, budget, max_depth)`, cached (`paths` as lists or tuples)."""
    key = paths if isinstance(paths, tuple) else tuple(tuple(p) for p in paths)
    return _static_plan(key, budget, max_depth)


@functools.lru_cache(maxsize=64)
def _static_plan(paths: tuple[tuple[int, ...], ...], budget: int, max_depth: int) -> StaticPlan:
    kept = kept_paths(list(paths), budget, max_depth)
    depth = max((len(k) for k in kept), default=0)
    levels = tuple(tuple(k for k in kept if len(k) == d) for d in range(1, depth + 1))
    groups = []
    for level in levels:
        by_parent: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for k in level:
            by_parent.setdefault(k[:-1], []).append(k)
        groups.append(tuple((par, tuple(children)) for par, children in by_parent.items()))
    return StaticPlan(levels, tuple(groups), frozenset(k[:-1] for k in kept),
                      1 + max((k[-1] for k in kept), default=0))
