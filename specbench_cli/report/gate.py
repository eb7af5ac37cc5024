"""The statistical gate of `specbench check`: per-question data a baseline stores, the paired
bootstrap interval for the change of a method's mean speedup, and the exact comparison of
accepted lengths (docs/ci-gate.md has the method and its measured error rates).

Speed. Per question q the paired ratio r(q) = method tok/s / AR tok/s, both measured in the same
run (AR first, the method right after), so a machine that is slower as a whole cancels out. The
mean speedup is S = mean_q r(q); the change from baseline to run is S_run / S_base - 1 over the
questions both have. Its interval comes from resampling questions with replacement (the same
questions on both sides: the pairs stay paired), `resamples` times from a seeded generator, and
taking the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles. The gate fails only when the
whole interval lies below -tolerance: the run is then slower with that confidence, by more than
the tolerance. An interval wholly above +tolerance is reported as faster (and passes).

Acceptance. Greedy decoding in float32 with the same thread count is deterministic, so every
question's accepted lengths (tokens added per step, per turn) must be exactly the baseline's; the
first question that differs is named. A change there is a change of the algorithm, whatever the
timing noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from specbench_cli.report import metrics

DEFAULT_TOLERANCE = 0.05      # the slowdown the gate must be sure of before it fails
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
METHOD = ("model", "method_label", "block_complexity")
QUESTION = ("task", "question_id")


def question_records(rows: Sequence[dict]) -> list[dict]:
    """One record per (model, method, BC, task, question) of every drafting method: its category,
    `ratio` (the paired ratio, mean over repeats and runs; None without an AR pair) and
    `accept_lengths` (per turn, of the first repeat; None when a turn failed)."""
    full = metrics.to_frame(rows)
    if full.empty:
        return []
    df = full[full["method"] != metrics.AR_METHOD]
    paired = metrics.paired_throughputs(metrics.question_throughputs(full))
    keys = list(METHOD + QUESTION)
    ratios = {} if paired.empty else {
        tuple(k): float(v) for k, v in paired.groupby(keys, sort=False)["ratio"].mean().items()}
    records = []
    for key, group in df.groupby(keys + ["category"], sort=False, dropna=False):
        first = group[group["repeat"] == group["repeat"].min()]
        first = first[first["run_id"] == first["run_id"].iloc[0]].sort_values("turn")
        ok = bool((first["status"] == "ok").all())
        record = dict(zip(keys + ["category"], key))
        record["question_id"] = str(record["question_id"])
        record["block_complexity"] = int(record["block_complexity"])
        record["ratio"] = ratios.get(tuple(key[:-1]))
        record["accept_lengths"] = [list(map(int, a)) for a in first["accept_lengths"]] if ok else None
        records.append(record)
    return records


def method_key(record: dict) -> tuple:
    return tuple(record[k] for k in METHOD)


def question_key(record: dict) -> tuple:
    return tuple(str(record[k]) for k in QUESTION)


def by_method(records: Sequence[dict]) -> dict[tuple, dict[tuple, dict]]:
    """records -> {(model, method, BC): {(task, question_id): record}} (input order kept)."""
    out: dict[tuple, dict[tuple, dict]] = {}
    for record in records:
        out.setdefault(method_key(record), {})[question_key(record)] = record
    return out


def bootstrap_change(base: Sequence[float], now: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
                     resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> tuple[float, float, float]:
    """(change, low, high): mean(now) / mean(base) - 1 over paired questions, and its percentile
    bootstrap interval (questions resampled with replacement, pairs kept together)."""
    b, n = np.asarray(base, dtype=float), np.asarray(now, dtype=float)
    if b.size == 0 or b.size != n.size:
        raise ValueError("need the same number (> 0) of baseline and run ratios")
    change = float(n.mean() / b.mean() - 1)
    rng = np.random.default_rng(seed)
    draws = np.empty(resamples)
    chunk = max(1, 2_000_000 // b.size)  # bounded memory for large suites
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, b.size, size=(min(chunk, resamples - start), b.size))
        draws[start:start + len(idx)] = n[idx].mean(axis=1) / b[idx].mean(axis=1) - 1
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return change, float(low), float(high)


@dataclass
class SpeedVerdict:
    """The speed judgement of one (model, method, BC)."""

    key: tuple
    n: int                  # questions with a ratio on both sides
    base: float             # mean paired speedup in the baseline, over those questions
    now: float              # ... and in the run
    change: float
    low: float
    high: float
    verdict: str            # "ok", "slower" (fails) or "faster"


def judge_speed(base_records: Sequence[dict], now_records: Sequence[dict], tolerance: float = DEFAULT_TOLERANCE,
                confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                seed: int = DEFAULT_SEED) -> list[SpeedVerdict]:
    """One verdict per method of the baseline that has paired questions in the run."""
    now = by_method(now_records)
    verdicts = []
    for key, questions in by_method(base_records).items():
        pairs = [(q["ratio"], now[key][qk]["ratio"]) for qk, q in questions.items()
                 if q.get("ratio") is not None and qk in now.get(key, {}) and now[key][qk]["ratio"] is not None]
        if not pairs:
            continue
        b, n = zip(*pairs)
        change, low, high = bootstrap_change(b, n, confidence, resamples, seed)
        verdict = "slower" if high < -tolerance else ("faster" if low > tolerance else "ok")
        verdicts.append(SpeedVerdict(key, len(pairs), float(np.mean(b)), float(np.mean(n)), change, low, high,
                                     verdict))
    return verdicts


@dataclass
class AcceptChange:
    """The first question of one method whose accepted lengths differ from the baseline's."""

    key: tuple
    question: dict          # the baseline's record of that question
    turn: int
    step: Optional[int]     # first differing step (None: the run has no such turn)
    mat_base: float
    mat_now: float
    changed: int            # questions that differ, of `compared`
    compared: int


def _mat(lengths: Sequence[int]) -> float:
    return sum(lengths) / len(lengths) if lengths else math.nan


def accept_changes(base_records: Sequence[dict], now_records: Sequence[dict]) -> list[AcceptChange]:
    """Per method, the first baseline question (in baseline order) whose accepted lengths the run
    does not reproduce exactly; questions missing or failed on either side are not compared."""
    now = by_method(now_records)
    found = []
    for key, questions in by_method(base_records).items():
        first, changed, compared = None, 0, 0
        for qk, q in questions.items():
            other = now.get(key, {}).get(qk)
            if q.get("accept_lengths") is None or other is None or other.get("accept_lengths") is None:
                continue
            compared += 1
            a, b = q["accept_lengths"], other["accept_lengths"]
            if a == b:
                continue
            changed += 1
            if first is None:
                turn = next((t for t in range(max(len(a), len(b))) if t >= len(a) or t >= len(b) or a[t] != b[t]))
                ta, tb = (a[turn] if turn < len(a) else []), (b[turn] if turn < len(b) else [])
                step = next((i for i in range(min(len(ta), len(tb))) if ta[i] != tb[i]), min(len(ta), len(tb)))
                first = (q, turn, step if ta and tb else None, _mat(ta), _mat(tb))
        if first is not None:
            found.append(AcceptChange(key, *first, changed=changed, compared=compared))
    return found


def _pct(value: float) -> str:
    return f"{value * 100:+.1f}%"


def speed_table(verdicts: Sequence[SpeedVerdict], confidence: float, tolerance: float):
    """A rich Table of the speed verdicts: speedup base -> now, change and its interval, verdict."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    with_model = len({v.key[0] for v in verdicts}) > 1
    grid = Table(title=f"Speed: change of the mean paired speedup, {confidence:.0%} bootstrap interval over questions "
                       f"(fails below -{tolerance:.0%})", header_style="bold cyan", box=box.SIMPLE_HEAD)
    for header in (["Model"] if with_model else []) + ["Method", "BC", "n", "Speedup\nbase → now",
                                                       "Change\n[interval]", "Verdict"]:
        grid.add_column(header, justify="left" if header in ("Model", "Method", "Verdict") else "right")
    for v in verdicts:
        verdict = {"slower": "[red]FAIL[/] slower", "faster": "[green]ok[/] faster"}.get(v.verdict, "[green]ok[/]")
        cells = [escape(str(v.key[0]))] if with_model else []
        cells += [escape(str(v.key[1])), str(v.key[2]), str(v.n), f"{v.base:.2f} → {v.now:.2f}",
                  f"{_pct(v.change)}\n[{_pct(v.low)}, {_pct(v.high)}]", verdict]
        grid.add_row(*cells)
    return grid


def accept_change_line(change: AcceptChange) -> str:
    """'pld (BC 10): accepted lengths differ from the baseline's first at question qa/203, turn 0,
    step 7: #MAT 2.10 -> 2.05 (3 of 18 questions changed)'."""
    q = change.question
    where = f"turn {change.turn}" + (f", step {change.step}" if change.step is not None else " (missing in the run)")
    return (f"{change.key[1]} (BC {change.key[2]}): accepted lengths differ from the baseline's first at question "
            f"{q['category']}/{q['question_id']}, {where}: #MAT {change.mat_base:.2f} → {change.mat_now:.2f} "
            f"({change.changed} of {change.compared} questions changed)")
