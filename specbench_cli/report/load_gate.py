"""`specbench baseline` and `specbench check` for load runs: the same statistics as the gate of
ordinary runs (report/gate.py), per load point instead of per question set.

Speed. At each (point, method) the paired speedup S = (sum tokens / sum latency) of the method
over the same of its baseline, on the requests both runs completed at that point (the same
request index and question on both sides, each paired with its own run's baseline request: a
machine that is slower as a whole cancels out). The change is S_now / S_base - 1; its interval
comes from resampling those requests with replacement (`resamples` times, seeded), and the check
fails only when the whole interval lies below -tolerance. An interval wholly above +tolerance
reads "faster" and passes.

Losslessness. A request whose output equalled its baseline's in the baseline run and differs
now is a failure (named): greedy decoding of a lossless method cannot change its tokens.

Thresholds. `--min-speedup POINT[:METHOD]=VALUE` ("*" for every point) fails when the whole
interval of the method's speedup at that point lies below VALUE (`report/load.py`'s bootstrap):
the run is then slower than the threshold with that confidence.

The baseline is a load run folder, or the JSON `specbench baseline LOAD_DIR` writes (the paired
requests of every speculative method, and the run's settings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from specbench_cli import __version__
from specbench_cli.errors import UsageError
from specbench_cli.jsonl import read_json_object
from specbench_cli.report import load as metrics
from specbench_cli.report.gate import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, DEFAULT_TOLERANCE

FORMAT = "specbench-load-baseline"
VERSION = 1
# config keys a baseline and a run must agree on where both record them
SETTINGS = ("model", "tasks", "categories", "limit", "question_ids", "max_new_tokens", "temperature", "dtype",
            "device", "prompt_template", "burstiness", "seed", "threads")
PAIR_KEYS = ("point", "method", "baseline", "index", "question_id", "tokens", "latency", "base_tokens",
             "base_latency", "equal")


def paired_requests(run: metrics.LoadRun) -> list[dict]:
    """One record per ok request of a speculative method that pairs with an ok baseline request."""
    frame = metrics.request_frame(run)
    spec = frame[frame["baseline"].astype(bool)]
    pairs = metrics.pairs_of(spec)
    return [{"point": r.point, "method": r.method, "baseline": r.baseline, "index": int(r.index),
             "question_id": str(r.question_id), "tokens": int(r.new_tokens), "latency": float(r.latency),
             "base_tokens": int(r.base_tokens), "base_latency": float(r.base_latency),
             "equal": None if r.equal is None else bool(r.equal)} for r in pairs.itertuples(index=False)]


def settings(run: metrics.LoadRun) -> dict:
    """The SETTINGS the run's manifest records: its `config`, then its `load` options (where the
    load generator keeps burstiness and the trace's seed)."""
    out = {}
    for section in ("load", "config"):
        doc = run.manifest.get(section) if isinstance(run.manifest.get(section), dict) else {}
        out.update({k: doc[k] for k in SETTINGS if k in doc})
    return out


def baseline_document(run: metrics.LoadRun) -> dict:
    from specbench_cli.report.render import jsonable

    return jsonable({"format": FORMAT, "version": VERSION,
                     "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     "run": run.run_id, "specbench": __version__, "settings": settings(run),
                     "requests": paired_requests(run)})


def read_baseline(path: Path) -> tuple[dict, list[dict]]:
    """(settings, paired requests) of a load run folder or a load baseline JSON; UsageError for
    anything else or a malformed record."""
    path = Path(path)
    if path.is_dir():
        if not metrics.is_load_run(path):
            raise UsageError(f"{path}: not a load run folder (a load run's baseline is a load run, or the JSON "
                             f"`specbench baseline` writes from one)")
        run = metrics.load_run(path)
        return settings(run), paired_requests(run)
    doc = read_json_object(path, f"baseline not found: {path}")
    if doc.get("format") != FORMAT:
        raise UsageError(f"{path}: not a load run's baseline (format {doc.get('format')!r}; write one with "
                         f"`specbench baseline LOAD_DIR -o FILE`)")
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise UsageError(f"{path}: version {doc.get('version')!r} is not one this specbench reads (1 to {VERSION})")
    requests = doc.get("requests")
    if not isinstance(requests, list) or not requests:
        raise UsageError(f"{path}: 'requests' must be a non-empty list (the paired requests `check` compares)")
    for i, r in enumerate(requests):
        problem = _request_problem(r)
        if problem:
            raise UsageError(f"{path}: requests[{i}]: {problem}")
    return (doc.get("settings") if isinstance(doc.get("settings"), dict) else {}), requests


def _request_problem(r: object) -> Optional[str]:
    if not isinstance(r, dict):
        return "not an object"
    for key in ("point", "method", "question_id"):
        if not isinstance(r.get(key), str):
            return f"'{key}' must be a string"
    for key in ("index", "tokens", "base_tokens"):
        if not isinstance(r.get(key), int) or isinstance(r.get(key), bool) or (key != "index" and r[key] < 0):
            return f"'{key}' must be an integer"
    for key in ("latency", "base_latency"):
        v = r.get(key)
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
            return f"'{key}' must be a number > 0"
    if r.get("equal") is not None and not isinstance(r.get("equal"), bool):
        return "'equal' must be true, false or null"
    return None


def mismatches(base_settings: dict, now_settings: dict) -> list[str]:
    """Settings both record with different values."""
    return [f"{k}: {base_settings[k]!r} vs {now_settings[k]!r}" for k in SETTINGS
            if k in base_settings and k in now_settings and base_settings[k] != now_settings[k]]


@dataclass
class LoadVerdict:
    point: str
    method: str
    n: int
    base: float
    now: float
    change: float
    low: float
    high: float
    verdict: str        # "ok", "slower" (fails), "faster"


def _speedup(tok, lat, btok, blat, axis=None):
    return (tok.sum(axis) / lat.sum(axis)) / (btok.sum(axis) / blat.sum(axis))


def judge_speed(base: Sequence[dict], now: Sequence[dict], tolerance: float = DEFAULT_TOLERANCE,
                confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                seed: int = DEFAULT_SEED) -> list[LoadVerdict]:
    """One verdict per (point, method) of the baseline with requests the run also paired."""
    mine = {(r["point"], r["method"], r["index"]): r for r in now}
    groups: dict[tuple, list[tuple[dict, dict]]] = {}
    for r in base:
        other = mine.get((r["point"], r["method"], r["index"]))
        if other is not None and other["question_id"] == r["question_id"]:
            groups.setdefault((r["point"], r["method"]), []).append((r, other))
    verdicts = []
    for (point, method), pairs in groups.items():
        cols = {side: {k: np.array([p[i][k] for p in pairs], dtype=float)
                       for k in ("tokens", "latency", "base_tokens", "base_latency")} for i, side in enumerate("bn")}
        b, n = cols["b"], cols["n"]
        s_base = float(_speedup(b["tokens"], b["latency"], b["base_tokens"], b["base_latency"]))
        s_now = float(_speedup(n["tokens"], n["latency"], n["base_tokens"], n["base_latency"]))
        change = s_now / s_base - 1
        rng = np.random.default_rng(seed)
        size = len(pairs)
        draws = np.empty(resamples)
        chunk = max(1, 2_000_000 // size)
        for start in range(0, resamples, chunk):
            idx = rng.integers(0, size, size=(min(chunk, resamples - start), size))
            sb = _speedup(b["tokens"][idx], b["latency"][idx], b["base_tokens"][idx], b["base_latency"][idx], 1)
            sn = _speedup(n["tokens"][idx], n["latency"][idx], n["base_tokens"][idx], n["base_latency"][idx], 1)
            draws[start:start + len(idx)] = sn / sb - 1
        tail = (1 - confidence) / 2
        low, high = (float(v) for v in np.quantile(draws, [tail, 1 - tail]))
        verdict = "slower" if high < -tolerance else ("faster" if low > tolerance else "ok")
        verdicts.append(LoadVerdict(point, method, size, s_base, s_now, change, low, high, verdict))
    return verdicts


def equality_failures(base: Sequence[dict], now: Sequence[dict]) -> list[str]:
    """One line per (point, method) where a request equal to its baseline's before differs now."""
    mine = {(r["point"], r["method"], r["index"]): r for r in now}
    lost: dict[tuple, list[dict]] = {}
    for r in base:
        other = mine.get((r["point"], r["method"], r["index"]))
        if r.get("equal") is True and other is not None and other.get("equal") is False \
                and other["question_id"] == r["question_id"]:
            lost.setdefault((r["point"], r["method"]), []).append(r)
    return [f"{method} at {point}: {len(rs)} request(s) equal to the baseline's output before differ now "
            f"(first: request {rs[0]['index']}, question {rs[0]['question_id']})" for (point, method), rs in lost.items()]


@dataclass(frozen=True)
class Threshold:
    point: str          # a point name or "*"
    method: str         # a method label or "" (every speculative method)
    value: float


def parse_threshold(text: str) -> Threshold:
    """'c4=1.1', 'c4:pld=1.1', '*:llama.cpp:ngram-mod=1.05' -> Threshold; UsageError otherwise."""
    where, sep, value = str(text).rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or not where or not (math.isfinite(number) and number > 0):
        raise UsageError(f"--min-speedup wants POINT[:METHOD]=VALUE with VALUE > 0 (e.g. c4=1.1, c4:pld=1.1, "
                         f"*:pld=1.0), got {text!r}")
    point, _, method = where.partition(":")
    return Threshold(point.strip(), method.strip(), number)


@dataclass
class ThresholdResult:
    threshold: Threshold
    point: str
    method: str
    speedup: float
    low: float
    high: float
    failed: bool


def judge_thresholds(summary: pd.DataFrame, thresholds: Sequence[Threshold]) -> tuple[list[ThresholdResult], list[str]]:
    """(results, thresholds that matched no measured point and method)."""
    spec = summary[summary["speculative"].astype(bool)]
    results, unmatched = [], []
    for t in thresholds:
        rows = spec[((spec["point"] == t.point) | (t.point == "*")) & ((spec["method"] == t.method) | (t.method == ""))]
        rows = rows[rows["speedup"].notna()]
        if rows.empty:
            unmatched.append(f"{t.point}{':' + t.method if t.method else ''}={t.value:g}")
            continue
        for r in rows.itertuples(index=False):
            results.append(ThresholdResult(t, r.point, r.method, r.speedup, r.speedup_low, r.speedup_high,
                                           bool(r.speedup_high < t.value)))
    return results, unmatched


def speed_table(verdicts: Sequence[LoadVerdict], confidence: float, tolerance: float):
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    grid = Table(title=f"Load speed: change of the paired speedup per point, {confidence:.0%} bootstrap interval over "
                       f"requests (fails below -{tolerance:.0%})", header_style="bold cyan", box=box.SIMPLE_HEAD)
    for header in ("Point", "Method", "n", "Speedup\nbase → now", "Change\n[interval]", "Verdict"):
        grid.add_column(header, justify="left" if header in ("Point", "Method", "Verdict") else "right")
    for v in verdicts:
        verdict = {"slower": "[red]FAIL[/] slower", "faster": "[green]ok[/] faster"}.get(v.verdict, "[green]ok[/]")
        grid.add_row(escape(v.point), escape(v.method), str(v.n), f"{v.base:.2f} → {v.now:.2f}",
                     f"{v.change * 100:+.1f}%\n[{v.low * 100:+.1f}%, {v.high * 100:+.1f}%]", verdict)
    return grid


def threshold_line(r: ThresholdResult) -> str:
    return (f"{r.method} at {r.point}: speedup {r.speedup:.2f} [{r.low:.2f}, {r.high:.2f}] "
            f"{'below' if r.failed else 'not surely below'} the threshold {r.threshold.value:g}")
