"""Static draft trees as lists of rank paths (`[[0], [1], [0, 0], ...]`: node = the r-th best
token at each depth below its parent), the published ones by name, and files of them.

- `mc_sim_7b_63` (Medusa's `medusa_choices.py`, what Spec-Bench runs for Medusa): 63 paths, 64
  tokens per forward with the root, depth <= 4.
- `vicuna_7b_stage2` (Medusa's `medusa_choices.py`, the tree tuned for Medusa-2 Vicuna-7B heads):
  63 paths, 64 tokens per forward, depth <= 4.
- `eagle1_25` (EAGLE-1's `choices.py`, there also called `mc_sim_7b_63`): 25 paths, depth <= 5.

These lists are the published trees' data, reproduced so Spec-Bench's settings can be run.
"""

from __future__ import annotations

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
