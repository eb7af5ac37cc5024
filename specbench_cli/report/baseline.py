"""Baselines and the regression check (`specbench baseline`, `specbench check`): plain functions."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from rich import box
from rich.markup import escape
from rich.table import Table

from specbench_cli import __version__
from specbench_cli.atomic import atomic_write
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.jsonl import read_json_object
from specbench_cli.report import metrics, render
from specbench_cli.report import table as report
from specbench_cli.store.runfolder import Run
from specbench_cli.tasks.categories import display_category

BASELINE_FORMAT = "specbench-baseline"
BASELINE_VERSION = 1
BASELINE_KEY = ("model", "method_label", "block_complexity", "category")


# Run settings a baseline records and `check` requires to be equal (the suite, the model and
# whatever changes #MAT or speedup); the questions file's path is machine-specific, so not here.
SETTINGS = ("model", "tasks", "categories", "limit", "question_ids", "max_new_tokens", "dtype", "device",
            "temperature", "top_p", "forward", "prompt_template", "batch_size")


def run_settings(run: Run) -> dict:
    """The SETTINGS of a run, from its manifest's config (absent keys are None). `forward` is the
    path the target really ran (`auto` resolved, from `model.forward`; runs made before `auto`
    existed recorded only `config.forward`, and runs before `--forward` existed used `sdpa`):
    the same questions decode at different speeds on different paths."""
    config = run.manifest.get("config") or {}
    settings = {key: config.get(key) for key in SETTINGS}
    settings["forward"] = (run.manifest.get("model") or {}).get("forward") or config.get("forward") or "sdpa"
    settings["prompt_template"] = config.get("prompt_template") or "auto"  # runs before the option: auto
    settings["batch_size"] = config.get("batch_size") or 1  # runs before the option: one sequence at a time
    return settings


def baseline_document(summary: pd.DataFrame, runs: list[Run]) -> dict:
    """The baseline JSON: one entry per (model, method, BC, category incl. overall), plus the
    settings of the run it was made from."""
    entries = [
        {**{k: row[k] for k in BASELINE_KEY}, "mat": row["mat"], "speedup": row["speedup"], "n": row["n_paired"]}
        for _, row in summary.iterrows()
    ]
    return render.jsonable({
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runs": [run.run_id for run in runs],
        "specbench": __version__,
        "settings": run_settings(runs[0]) if len(runs) == 1 else None,
        "entries": entries,
    })


def _number_or_null(v: object) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


# entry key -> (check, what it wants)
ENTRY_TYPES = {
    "model": (lambda v: isinstance(v, str), "a string"),
    "method_label": (lambda v: isinstance(v, str), "a string"),
    "block_complexity": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "category": (lambda v: isinstance(v, str), "a string"),
    "mat": (_number_or_null, "a finite number or null"),
    "speedup": (_number_or_null, "a finite number or null"),
    "n": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "an integer"),
}


def read_baseline(path: Path) -> dict:
    """A baseline document with well-typed entries; `UsageError` naming the file (and entry)
    if it is missing, not a baseline, or has no entries (a check would compare nothing)."""
    doc = read_json_object(path, f"baseline file not found: {path}")
    if doc.get("format") != BASELINE_FORMAT or not isinstance(doc.get("entries"), list):
        raise UsageError(f"{path}: not a specbench baseline (write one with `specbench baseline RUN_DIR -o FILE`)")
    if not doc["entries"]:
        raise UsageError(f"{path}: the baseline has no entries, so a check against it would compare nothing")
    if doc.get("settings") is not None and not isinstance(doc["settings"], dict):
        raise UsageError(f"{path}: 'settings' must be an object")
    for i, entry in enumerate(doc["entries"]):
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: entry {i} must be an object")
        missing = [k for k in BASELINE_KEY + ("mat", "speedup") if k not in entry]
        if missing:
            raise UsageError(f"{path}: entry {i} lacks {', '.join(missing)}")
        for key, (check, wants) in ENTRY_TYPES.items():
            if key in entry and not check(entry[key]):
                raise UsageError(f"{path}: entry {i}: '{key}' must be {wants}, got {json.dumps(entry[key])[:40]}")
    return doc


def mismatches(doc: dict, run: Run, rows: list[dict]) -> list[str]:
    """How the baseline's suite, model or settings differ from the run's ('' list: they match).

    Recorded settings are compared key by key; for every baseline (including older ones without
    settings) the models, block complexities and categories of its entries must be the run's."""
    found = []
    recorded = doc.get("settings") or {}
    current = run_settings(run)
    for key in SETTINGS:
        if key in recorded and recorded[key] != current[key]:
            found.append(f"{key}: baseline {json.dumps(recorded[key])}, run {json.dumps(current[key])}")
    frame = metrics.to_frame(rows)
    entries = doc["entries"]
    for key, have in (("model", {run.model_name}), ("block_complexity", {int(b) for b in frame["block_complexity"]})):
        want = {e[key] for e in entries}
        if not want <= have:
            found.append(f"{key}: baseline {_listing(want)}, run {_listing(have)}")
    want = {e["category"] for e in entries} - {metrics.OVERALL}
    have = set(frame["category"])
    if want != have:
        found.append(f"categories: baseline {_listing(want)}, run {_listing(have)}")
    return found


def _listing(values: set) -> str:
    return ",".join(sorted(str(v) for v in values)) or "none"


def relative(before: float | None, after: float | None) -> float:
    """(after - before) / before; NaN when either is missing or before is 0."""
    if before is None or after is None or not before or not math.isfinite(before) or not math.isfinite(after):
        return float("nan")
    return (after - before) / abs(before)


def check_entries(summary: pd.DataFrame, entries: list[dict], mat_tol: float, speedup_tol: float) -> list[dict]:
    """Compare a summary with baseline entries; one record per entry that moved.

    #MAT is checked both ways (greedy acceptance is deterministic: a rise can be a
    verification bug just as a fall can be a drafter bug). Speedup fails only when it drops
    by more than `speedup_tol`; a rise beyond it is reported as `faster`. An entry missing
    from the run is a regression; a missing speedup is checked only if the baseline had one.
    """
    current = {tuple(row[k] for k in BASELINE_KEY): row for _, row in summary.iterrows()}
    moved = []
    for entry in entries:
        key = tuple(entry[k] for k in BASELINE_KEY)
        row = current.get(key)
        record = {**dict(zip(BASELINE_KEY, key)), "mat_base": entry["mat"], "speedup_base": entry["speedup"],
                  "mat_now": None, "speedup_now": None, "problems": [], "regression": False}
        if row is None:
            record["problems"].append("missing from run")
            record["regression"] = True
            moved.append(record)
            continue
        record["mat_now"], record["speedup_now"] = row["mat"], row["speedup"]
        mat_change = relative(entry["mat"], row["mat"])
        if entry["mat"] is not None and not (abs(mat_change) <= mat_tol):
            record["problems"].append(f"#MAT {_pct(mat_change)}")
            record["regression"] = True
        speed_change = relative(entry["speedup"], row["speedup"])
        if entry["speedup"] is not None:
            if not speed_change >= -speedup_tol:
                record["problems"].append(f"speedup {_pct(speed_change)}")
                record["regression"] = True
            elif speed_change > speedup_tol:
                record["problems"].append(f"faster {_pct(speed_change)}")
        if record["problems"]:
            moved.append(record)
    return moved


def nothing_compared(summary: pd.DataFrame, entries: list[dict]) -> str | None:
    """Why `check` would compare nothing (None when at least one baseline number meets the run's):
    no entry has a #MAT or speedup, or no entry's (model, method, BC, category) is in the run."""
    if not any(_num(e.get("mat")) is not None or _num(e.get("speedup")) is not None for e in entries):
        return "every baseline entry has #MAT and speedup null (made from a run whose rows all failed?)"
    current = {tuple(row[k] for k in BASELINE_KEY) for _, row in summary.iterrows()}
    if not any(tuple(e[k] for k in BASELINE_KEY) in current for e in entries):
        return "no baseline entry's (model, method, BC, category) is in the run"
    return None


def _pct(change: float) -> str:
    """'+12.3%', or 'missing' for NaN."""
    return f"{change * 100:+.1f}%" if math.isfinite(change) else "missing"


def diff_table(moved: list[dict]) -> Table:
    """Rich table of baseline entries that moved (model column only when several models)."""
    with_model = len({rec["model"] for rec in moved}) > 1
    grid = Table(title="Baseline check: what moved", header_style="bold cyan", box=box.SIMPLE_HEAD)
    headers = (["Model"] if with_model else []) + ["Method", "BC", "Category", "#MAT\nbase → now",
                                                   "Speedup\nbase → now", "Verdict"]
    for header in headers:
        grid.add_column(header, justify="right" if header in ("BC",) or "→" in header else "left")
    for rec in moved:
        verdict = ("[red]FAIL[/]\n" if rec["regression"] else "[green]ok[/]\n") + escape("\n".join(rec["problems"]))
        cells = [escape(str(rec["model"]))] if with_model else []
        cells += [escape(str(rec["method_label"])), str(rec["block_complexity"]),
                  display_category(rec["category"]),
                  f"{report.format_value(_num(rec['mat_base']))} → {report.format_value(_num(rec['mat_now']))}",
                  f"{report.format_value(_num(rec['speedup_base']))} → {report.format_value(_num(rec['speedup_now']))}",
                  verdict]
        grid.add_row(*cells)
    return grid


def _num(value: object) -> float | None:
    return None if value is None else float(value)


def write_baseline(summary: pd.DataFrame, runs: list[Run], output: Path) -> dict:
    """Write the baseline JSON for `summary` to `output`; return the document."""
    doc = baseline_document(summary, runs)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(output, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {output}: {exc}") from exc
    return doc
