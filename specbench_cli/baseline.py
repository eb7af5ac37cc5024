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

from specbench_cli import __version__, metrics, report
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.jsonl import read_json_object
from specbench_cli.runfolder import Run

BASELINE_FORMAT = "specbench-baseline"
BASELINE_VERSION = 1
BASELINE_KEY = ("model", "method_label", "block_complexity", "category")


def baseline_document(summary: pd.DataFrame, runs: list[Run]) -> dict:
    """The baseline JSON: one entry per (model, method, BC, category incl. overall)."""
    entries = [
        {**{k: row[k] for k in BASELINE_KEY}, "mat": row["mat"], "speedup": row["speedup"], "n": row["n_paired"]}
        for _, row in summary.iterrows()
    ]
    return report.jsonable({
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runs": [run.run_id for run in runs],
        "specbench": __version__,
        "entries": entries,
    })


def read_baseline(path: Path) -> list[dict]:
    """Entries of a baseline file; `UsageError` if it is missing or not a baseline."""
    doc = read_json_object(path, f"baseline file not found: {path}")
    if doc.get("format") != BASELINE_FORMAT or not isinstance(doc.get("entries"), list):
        raise UsageError(f"{path}: not a specbench baseline (write one with `specbench baseline RUN_DIR -o FILE`)")
    for i, entry in enumerate(doc["entries"]):
        missing = [k for k in BASELINE_KEY + ("mat", "speedup") if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise UsageError(f"{path}: entry {i} lacks {', '.join(missing)}")
    return doc["entries"]


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
                  metrics.display_category(rec["category"]),
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
        output.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {output}: {exc}") from exc
    return doc
