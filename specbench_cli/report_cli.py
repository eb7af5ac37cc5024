"""Commands that read result folders: report, check, baseline, compare, export.

`app.py` calls `register(app)`. Commands raise `UsageError` (exit 2) for bad input; `check`
exits 1 through `typer.Exit(1)` after printing what regressed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import List, Optional

import pandas as pd
import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from specbench_cli import __version__, metrics, report
from specbench_cli.console import err, out
from specbench_cli.jsonl import read_json_object
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.results_io import Run, all_rows, load_runs

BASELINE_FORMAT = "specbench-baseline"
BASELINE_VERSION = 1
BASELINE_KEY = ("model", "method_label", "block_complexity", "category")
EXPORT_FORMATS = ("spec-bench",)


# ----------------------------------------------------------------------------- loading


def load(paths: List[Path]) -> tuple[list[Run], list[dict]]:
    """Load run folders, print their load warnings, and return (runs, tagged rows)."""
    runs = load_runs(paths)
    for run in runs:
        for warning in run.warnings:
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    rows = all_rows(runs)
    if not rows:
        raise UsageError(f"no rows in {', '.join(str(p) for p in paths)} (nothing has finished yet?)")
    return runs, rows


def summary_of(paths: List[Path]) -> tuple[list[Run], list[dict], pd.DataFrame]:
    """Load run folders and summarize them per (model, method, BC, category) plus overall."""
    runs, rows = load(paths)
    return runs, rows, metrics.summarize(rows)


# ----------------------------------------------------------------------------- baselines


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


# ----------------------------------------------------------------------------- export


def safe_name(text: str) -> str:
    """A file-name-safe version of a label: 'lookahead(W=5,N=3)' -> 'lookahead_W=5_N=3_'."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text)


def _question_id(qid: str) -> int | str:
    """Spec-Bench question ids are ints; keep strings that are not."""
    return int(qid) if str(qid).isdigit() else qid


def _epoch(timestamp: str | None) -> float | None:
    """ISO-8601 -> seconds since the epoch (Spec-Bench's `tstamp`)."""
    try:
        return datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def spec_bench_answers(rows: list[dict]) -> tuple[dict[str, list[dict]], int]:
    """Spec-Bench answer lines per file name, and the number of questions skipped for errors.

    One file per (model, method_label, repeat) — the repeat is in the name only when a run
    has several. One line per question with all turns ok; lists run over turns except
    `accept_lengths`, which is concatenated over turns (as Spec-Bench writes it).
    """
    frame = pd.DataFrame(rows)
    multi_repeat = frame.groupby(["run_id", "method_label"])["repeat"].nunique().gt(1).any()
    files: dict[str, list[dict]] = {}
    skipped = 0
    keys = ["run_id", "model", "method_label", "repeat", "question_id"]
    for (run_id, model, label, repeat, qid), group in frame.groupby(keys, sort=False):
        group = group.sort_values("turn")
        if (group["status"] != "ok").any():
            skipped += 1
            continue
        name = f"{safe_name(model)}-{safe_name(label)}" + (f"-r{repeat}" if multi_repeat else "") + ".jsonl"
        files.setdefault(name, []).append({
            "question_id": _question_id(qid),
            "category": group["category"].iloc[0],
            "answer_id": hashlib.sha1(f"{run_id}/{label}/{qid}/{repeat}".encode()).hexdigest()[:22],
            "model_id": f"{model}-{label}",
            "choices": [{
                "index": 0,
                "turns": list(group["output_text"].fillna("")),
                "new_tokens": [int(v) for v in group["new_tokens"]],
                "wall_time": [float(v) for v in group["wall_time"]],
                "accept_lengths": [int(a) for row in group["accept_lengths"] for a in row],
                "decoding_steps": [int(v) for v in group["steps"]],
            }],
            "tstamp": _epoch(group["timestamp"].iloc[-1]) if "timestamp" in group else None,
        })
    return files, skipped


# ----------------------------------------------------------------------------- commands


def register(app: typer.Typer) -> None:
    """Add report, check, baseline, compare and export to the main app."""
    app.command("report")(report_command)
    app.command("check")(check_command)
    app.command("baseline")(baseline_command)
    app.command("compare")(compare_command)
    app.command("export")(export_command)


def report_command(
    run_dirs: List[Path] = typer.Argument(..., metavar="RUN_DIR...", help="One or more result folders."),
    fmt: Optional[str] = typer.Option(
        None, "--format", "-f", help="markdown|csv|latex|json: write only table.<ext> and print it instead of the terminal table."
    ),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output folder [default: first RUN_DIR/report]."),
    columns: str = typer.Option("", "--columns", help="Extra columns, comma-separated: bc, mbsu, params, median (median paired speedup), agree (share of outputs equal to AR)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures."),
) -> None:
    """Spec-Bench table (speedup per category, #MAT, tok/s) plus figures, from result folders."""
    if fmt is not None and fmt not in report.FORMATS:
        raise UsageError(f"unknown format '{fmt}'; choose from {', '.join(report.FORMATS)}")
    _, rows, summary = summary_of(run_dirs)
    try:
        table = report.spec_bench_table(summary, columns.split(","))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    directory = output or run_dirs[0] / "report"
    written = write_tables(table, summary, directory, [fmt] if fmt else list(report.FORMATS))
    if fmt:
        typer.echo(report.render(table, fmt, summary), nl=False)
    else:
        report.print_table(table)
    if not no_plots:
        from specbench_cli import plots  # matplotlib only when figures are wanted

        written += plots.write_plots(rows, summary, directory)
    err.print(f"wrote {len(written)} file{'s' if len(written) != 1 else ''} to {escape(str(directory))}",
              highlight=False)


def write_tables(table: report.TableData, summary: pd.DataFrame, directory: Path, formats: list[str]) -> list[Path]:
    """Write table.<ext> for each format; return the paths."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for fmt in formats:
            path = directory / f"table.{report.EXTENSIONS[fmt]}"
            path.write_text(report.render(table, fmt, summary), encoding="utf-8")
            paths.append(path)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write to {directory}: {exc}") from exc
    return paths


def check_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    baseline: Path = typer.Option(..., "--baseline", "-b", help="Baseline JSON from `specbench baseline`."),
    mat_tol: float = typer.Option(0.02, "--mat-tol", help="Allowed relative #MAT change, either way."),
    speedup_tol: float = typer.Option(0.25, "--speedup-tol", help="Allowed relative speedup drop."),
) -> None:
    """CI gate: exit 0 within tolerance, 1 on regression, 2 on bad input."""
    if mat_tol < 0 or speedup_tol < 0:
        raise UsageError("tolerances must be >= 0")
    entries = read_baseline(baseline)
    _, _, summary = summary_of([run_dir])
    moved = check_entries(summary, entries, mat_tol, speedup_tol)
    regressions = sum(rec["regression"] for rec in moved)
    if moved:
        out.print(diff_table(moved))
    if regressions:
        out.print(f"[red]{regressions} of {len(entries)} baseline entries regressed[/] "
                  f"(#MAT tolerance ±{mat_tol:.0%}, speedup tolerance -{speedup_tol:.0%}).")
        raise typer.Exit(1)
    out.print(f"[green]ok:[/] {len(entries)} baseline entries within tolerance.")


def baseline_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    output: Path = typer.Option(..., "--output", "-o", help="Baseline JSON file to write."),
) -> None:
    """Write a baseline (#MAT, speedup, n per model, method, BC and category) for `check`."""
    runs, _, summary = summary_of([run_dir])
    doc = baseline_document(summary, runs)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {output}: {exc}") from exc
    err.print(f"wrote {len(doc['entries'])} baseline entries to {escape(str(output))}", highlight=False)


def compare_command(
    run_a: Path = typer.Argument(..., metavar="RUN_A"),
    run_b: Path = typer.Argument(..., metavar="RUN_B"),
) -> None:
    """Run A vs run B side by side: speedup, #MAT and tok/s per category with relative change."""
    _, _, summary_a = summary_of([run_a])
    _, _, summary_b = summary_of([run_b])
    for metric in ("speedup", "mat", "tokens_per_s"):
        try:
            table = report.comparison_table(summary_a, summary_b, metric)
        except ValueError as exc:
            raise UsageError(f"cannot compare {run_a} and {run_b}: {exc}") from exc
        report.print_table(table)


def export_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    fmt: str = typer.Option("spec-bench", "--format", "-f", help="Only spec-bench (answer-file JSONL per method)."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the answer files."),
) -> None:
    """Write Spec-Bench answer files (one JSONL per method, AR included) for its own scripts."""
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"unknown export format '{fmt}'; choose from {', '.join(EXPORT_FORMATS)}")
    _, rows = load([run_dir])
    files, skipped = spec_bench_answers(rows)
    if not any(row["method"] == metrics.AR_METHOD for row in rows):
        err.print("[yellow]warning:[/] no `ar` rows: Spec-Bench's speed.py needs an AR baseline file")
    if skipped:
        err.print(f"[yellow]warning:[/] left out {skipped} question(s) with an errored turn")
    try:
        output.mkdir(parents=True, exist_ok=True)
        for name, lines in files.items():
            text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
            (output / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RuntimeFailure(f"cannot write to {output}: {exc}") from exc
    for name, lines in files.items():
        out.print(f"{escape(str(output / name))}: {len(lines)} questions", highlight=False)
