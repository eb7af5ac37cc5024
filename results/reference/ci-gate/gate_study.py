"""How often the statistical gate of `specbench check` fails a change that is not there, and how
often it catches one that is (docs/ci-gate.md has the method).

Input: RUNS/pair-NN/{a,b}/<run_id>/, pairs of runs of one configuration made one after the other
on the same machine (A/A pairs: nothing changed between a and b). For each pair and each suite
size:

- false alarm: `b` checked against a baseline of `a` fails the speed gate;
- detection: the same, with every wall time of `b`'s drafting methods divided by (1 - SLOWDOWN),
  i.e. their tokens/s times (1 - SLOWDOWN): a real slowdown on top of real noise;
- exact acceptance: `b`'s accepted lengths equal `a`'s question by question (greedy float32).

A size smaller than the runs uses the first questions of each category in run order, which are
the questions `--limit` of that size selects (18 = 3 per category of Spec-Bench's 6). Writes a
Markdown table and a JSON file with every pair's numbers.

    python gate_study.py RUNS [--sizes 18,60] [--slowdown 0.10] [--out results-60q.md]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import OrderedDict
from pathlib import Path

from specbench_cli.atomic import atomic_write
from specbench_cli.report import gate
from specbench_cli.store.conditions import busy_reason
from specbench_cli.store.runfolder import Run, load_run

AR = "ar"


def find_pairs(root: Path) -> list[tuple[str, Run, Run]]:
    """(name, a, b) for every RUNS/pair-*/ holding one finished run under a/ and one under b/."""
    pairs = []
    for folder in sorted(root.glob("pair-*")):
        sides = []
        for side in ("a", "b"):
            runs = [load_run(p.parent) for p in sorted((folder / side).glob("*/manifest.json"))]
            runs = [r for r in runs if r.manifest.get("finished")]
            sides.append(runs[0] if len(runs) == 1 else None)
        if all(sides):
            pairs.append((folder.name, sides[0], sides[1]))
    return pairs


def first_questions(rows: list[dict], per_category: int) -> list[dict]:
    """The rows of the first `per_category` questions of each category, in run order."""
    chosen: dict[str, list] = {}
    for row in rows:
        ids = chosen.setdefault(row["category"], [])
        key = (row.get("task"), str(row["question_id"]))
        if key not in ids and len(ids) < per_category:
            ids.append(key)
    keep = {key for ids in chosen.values() for key in ids}
    return [r for r in rows if (r.get("task"), str(r["question_id"])) in keep]


def slowed(rows: list[dict], slowdown: float) -> list[dict]:
    """Every drafting method's tokens/s times (1 - slowdown); AR as it was."""
    return [r if r["method"] == AR else {**r, "wall_time": r["wall_time"] / (1 - slowdown)} for r in rows]


def questions_per_category(run: Run) -> int:
    counts: dict[str, set] = {}
    for row in run.rows:
        counts.setdefault(row["category"], set()).add(str(row["question_id"]))
    return min(len(ids) for ids in counts.values())


def study(pairs: list[tuple[str, Run, Run]], sizes: list[int], slowdown: float = 0.10,
          tolerance: float = gate.DEFAULT_TOLERANCE, confidence: float = gate.DEFAULT_CONFIDENCE,
          resamples: int = gate.DEFAULT_RESAMPLES) -> dict:
    """Per size: one record per pair (verdicts per method, with and without the slowdown) and the rates."""
    out: dict = {"tolerance": tolerance, "confidence": confidence, "resamples": resamples, "slowdown": slowdown,
                 "sizes": {}}
    for size in sizes:
        records = []
        for name, a, b in pairs:
            categories = len({r["category"] for r in a.rows})
            per = size // categories
            if per < 1 or per > min(questions_per_category(a), questions_per_category(b)):
                raise SystemExit(f"{name}: its runs have fewer than {size} questions ({categories} categories)")
            rows_a, rows_b = first_questions(a.rows, per), first_questions(b.rows, per)
            base = gate.question_records(rows_a)
            same = gate.judge_speed(base, gate.question_records(rows_b), tolerance, confidence, resamples)
            slow = gate.judge_speed(base, gate.question_records(slowed(rows_b, slowdown)), tolerance, confidence,
                                    resamples)
            slower = {v.key: v for v in slow}
            changed = gate.accept_changes(base, gate.question_records(rows_b))
            records.append({
                "pair": name, "questions": len({(r.get("task"), str(r["question_id"])) for r in rows_a}),
                "busy": [why for why in (busy_reason(a.manifest), busy_reason(b.manifest)) if why],
                "methods": {key[1]: {"aa": _verdict(v), "slowed": _verdict(slower[key])}
                            for key, v in ((v.key, v) for v in same) if key in slower},
                "accept_changed": {c.key[1]: gate.accept_change_line(c) for c in changed},
            })
        out["sizes"][str(size)] = {"pairs": records, "rates": rates(records)}
    return out


def _verdict(v: gate.SpeedVerdict) -> dict:
    return {"change": v.change, "low": v.low, "high": v.high, "verdict": v.verdict, "n": v.n}


def rates(records: list[dict]) -> dict:
    """Per method and for any method: false alarms and detections over the pairs (count, share, Wilson 95 %)."""
    methods = list(OrderedDict.fromkeys(m for r in records for m in r["methods"]))
    out = {}
    for method in [*methods, "any method"]:
        def failed(record, side, method=method):
            chosen = record["methods"].values() if method == "any method" else [record["methods"].get(method)]
            return any(v is not None and v[side]["verdict"] == "slower" for v in chosen)

        n = len(records)
        alarms = sum(failed(r, "aa") for r in records)
        caught = sum(failed(r, "slowed") for r in records)
        aa = [r["methods"][method]["aa"] for r in records if method in r["methods"]]
        out[method] = {"pairs": n, "false_alarms": alarms, "false_alarm_rate": alarms / n if n else math.nan,
                       "false_alarm_ci": wilson(alarms, n), "detected": caught,
                       "detection_rate": caught / n if n else math.nan, "detection_ci": wilson(caught, n),
                       "aa_change_median": _median([v["change"] for v in aa]),
                       "aa_width_median": _median([v["high"] - v["low"] for v in aa]),
                       "accept_identical": sum(method not in r["accept_changed"] for r in records)
                       if method != "any method" else sum(not r["accept_changed"] for r in records)}
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _median(values: list[float]) -> float:
    values = sorted(values)
    if not values:
        return math.nan
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def markdown(result: dict) -> str:
    lines = [f"Gate: fail when the whole {result['confidence']:.0%} bootstrap interval ({result['resamples']} "
             f"resamples) of the change of the mean paired speedup lies below -{result['tolerance']:.0%}. "
             f"Detection: the run's drafting methods made {result['slowdown']:.0%} slower (wall times / "
             f"{1 - result['slowdown']:.2f}).", "",
             "| questions | method | A/A pairs | false alarms | rate [95 % CI] | detected | rate [95 % CI] | "
             "median A/A change | median interval width | accepted lengths identical |",
             "| ---: | :--- | ---: | ---: | :--- | ---: | :--- | ---: | ---: | ---: |"]
    for size, block in result["sizes"].items():
        for method, r in block["rates"].items():
            lines.append(f"| {size} | {method} | {r['pairs']} | {r['false_alarms']} | {_rate(r['false_alarm_rate'], r['false_alarm_ci'])} "
                         f"| {r['detected']} | {_rate(r['detection_rate'], r['detection_ci'])} | "
                         f"{_pct(r['aa_change_median'])} | {_pct(r['aa_width_median'], sign=False)} | "
                         f"{r['accept_identical']} of {r['pairs']} |")
    busy = sorted({p["pair"] for block in result["sizes"].values() for p in block["pairs"] if p["busy"]})
    if busy:
        lines += ["", f"Runs timed on a busy machine (kept, flagged): {', '.join(busy)}."]
    return "\n".join(lines) + "\n"


def _rate(rate: float, ci: tuple[float, float]) -> str:
    return "–" if math.isnan(rate) else f"{rate:.0%} [{ci[0]:.0%}, {ci[1]:.0%}]"


def _pct(value: float, sign: bool = True) -> str:
    return "–" if math.isnan(value) else f"{value * 100:{'+' if sign else ''}.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--sizes", default="18,60", help="suite sizes, comma-separated (default 18,60)")
    parser.add_argument("--slowdown", type=float, default=0.10)
    parser.add_argument("--tolerance", type=float, default=gate.DEFAULT_TOLERANCE)
    parser.add_argument("--confidence", type=float, default=gate.DEFAULT_CONFIDENCE)
    parser.add_argument("--resamples", type=int, default=gate.DEFAULT_RESAMPLES)
    parser.add_argument("--out", type=Path, help="report file (default results-<largest size>q.md)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out = args.out or Path(f"results-{max(sizes)}q.md")
    pairs = find_pairs(args.runs)
    if not pairs:
        raise SystemExit(f"no finished pairs under {args.runs} (pair-NN/a/<run>, pair-NN/b/<run>)")
    result = study(pairs, sizes, args.slowdown, args.tolerance, args.confidence,
                   args.resamples)
    atomic_write(out, markdown(result))
    atomic_write(out.with_suffix(".json"), json.dumps(result, indent=1) + "\n")
    print(markdown(result), end="")


if __name__ == "__main__":
    main()
