"""Token-level agreement of two models' greedy outputs, from the `ar` rows of two run folders
(how far MSN's greedy answers moved from SFT's).

    python results/reference/msn/msn_agreement.py RUN_A RUN_B [--json out.json]

Rows are paired by (question_id, turn, repeat). For each pair, with a = A's output ids and
b = B's: identical (a == b), common prefix length p, and n = max(len(a), len(b)). Reported:
pairs, identical pairs, mean p, and the token agreement sum(p) / sum(n) (the share of output
tokens produced before the two greedy continuations first differ; after a first difference the
positions no longer line up, so positional matches there are not counted), per category and
overall. Only `status == ok` rows of method `ar` are used; a pair missing on one side is
reported as unpaired, not guessed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from specbench_cli.atomic import atomic_write
from specbench_cli.run.runner import compare_ids


def ar_outputs(run: Path) -> dict[tuple, tuple[str, list[int]]]:
    """(question_id, turn, repeat) -> (category, output_ids) of the run's ok `ar` rows."""
    from specbench_cli.store.runfolder import load_run

    out = {}
    for row in load_run(run).rows:
        if row.get("method") == "ar" and row.get("status") == "ok":
            out[(str(row["question_id"]), int(row["turn"]), int(row.get("repeat", 0)))] = (
                row.get("category", "?"), list(row["output_ids"]))
    return out


def common_prefix(a: list[int], b: list[int]) -> int:
    same, first = compare_ids(a, b)  # the runner's own AR comparison
    return len(a) if same else first


def agreement(a_rows: dict, b_rows: dict) -> dict:
    """Per-category and overall agreement of two `ar_outputs` maps (see module docstring)."""
    groups: dict[str, dict] = defaultdict(lambda: {"pairs": 0, "identical": 0, "prefix": 0, "tokens": 0})
    for key in sorted(set(a_rows) & set(b_rows)):
        cat, a = a_rows[key]
        _, b = b_rows[key]
        p = common_prefix(a, b)
        for g in (cat, "overall"):
            s = groups[g]
            s["pairs"] += 1
            s["identical"] += int(a == b)
            s["prefix"] += p
            s["tokens"] += max(len(a), len(b))
    table = {}
    for g, s in groups.items():
        table[g] = {"pairs": s["pairs"], "identical": s["identical"],
                    "mean_common_prefix": round(s["prefix"] / s["pairs"], 2),
                    "token_agreement": round(s["prefix"] / s["tokens"], 4) if s["tokens"] else None}
    return {"categories": table, "unpaired": len(set(a_rows) ^ set(b_rows))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Token agreement of two runs' AR (greedy) outputs.")
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--json", type=Path, help="Also write the result here.")
    args = ap.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not (run / "samples.jsonl").is_file():
            print(f"error: {run} is not a run folder (no samples.jsonl)", file=sys.stderr)
            return 2
    res = agreement(ar_outputs(args.run_a), ar_outputs(args.run_b))
    res.update({"run_a": str(args.run_a), "run_b": str(args.run_b)})
    print("| category | pairs | identical | mean common prefix (tokens) | token agreement |")
    print("|---|---|---|---|---|")
    for cat, s in sorted(res["categories"].items(), key=lambda kv: (kv[0] == "overall", kv[0])):
        print(f"| {cat} | {s['pairs']} | {s['identical']} | {s['mean_common_prefix']} | {s['token_agreement']} |")
    if args.json:
        atomic_write(args.json, json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
