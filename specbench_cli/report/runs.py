"""Report-writing as plain functions: load run folders, summarise, write the table files and
figures. `specbench report` and the summary at the end of `specbench run` both call
`write_report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import pandas as pd
from rich.markup import escape

from specbench_cli.atomic import atomic_write
from specbench_cli.console import err
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.report import metrics, render
from specbench_cli.report import table as report
from specbench_cli.store.conditions import busy_reason, machine_line
from specbench_cli.store.runfolder import Run, all_rows, load_runs


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


def busy_runs(runs: list[Run]) -> list[tuple[Run, str]]:
    """The runs whose manifest records a machine busier than the run's own threads, and why."""
    return [(run, why) for run in runs if (why := busy_reason(run.manifest))]


def summary_of(paths: List[Path]) -> tuple[list[Run], list[dict], pd.DataFrame]:
    """Load run folders and summarize them per (model, method, BC, category) plus overall."""
    runs, rows = load(paths)
    return runs, rows, metrics.summarize(rows)


def write_report(run_dirs: List[Path], fmt: Optional[str] = None, output: Optional[Path] = None,
                 columns: str = "", plots: bool = True, execute_code: bool = False) -> Path:
    """Print the table (the terminal table, or the `fmt` rendering on stdout) and write
    table.<ext> (all formats, or only `fmt`) plus figures to `output` (default: first
    run's report/). Quality columns come from rows that carry a scorer; HumanEval code runs
    only with `execute_code` (the user's --execute-code). Returns the folder."""
    import typer

    if fmt is not None and fmt not in report.FORMATS:
        raise UsageError(f"unknown format '{fmt}'; choose from {', '.join(report.FORMATS)}")
    runs, rows, summary = summary_of(run_dirs)
    from specbench_cli.scoring.quality import quality_summary

    try:
        table = report.spec_bench_table(summary, [*report.DEFAULT_COLUMNS, *columns.split(",")],
                                        quality_summary(rows, execute_code))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    busy = busy_runs(runs)
    table.notes += list(dict.fromkeys(f"{run.run_id}: {machine_line(run.manifest)}" if len(runs) > 1
                                      else machine_line(run.manifest) for run in runs))
    table.notes += [f"timed on a busy machine: {run.run_id} ({why}); its speedups are not a quiet machine's"
                    for run, why in busy]
    directory = output or Path(run_dirs[0]) / "report"
    written = write_tables(table, summary, directory, [fmt] if fmt else list(report.FORMATS))
    if fmt:
        typer.echo(render.render(table, fmt, summary), nl=False)
    else:
        report.print_table(table)
    for run, why in busy:
        err.print(f"[yellow]warning:[/] {escape(run.run_id)} was timed on a busy machine ({why}): its speedups "
                  f"are not a quiet machine's", highlight=False)
    from specbench_cli.report.batch import write_batch_report

    batch_table, batch_files = write_batch_report(rows, directory, [fmt] if fmt else list(report.FORMATS), plots)
    written += batch_files
    if batch_table is not None and not fmt:
        report.print_table(batch_table)
    if plots:
        from specbench_cli.report import plots as figures  # matplotlib only when figures are wanted

        written += figures.write_plots(rows, summary, directory)
    err.print(f"wrote {len(written)} file{'s' if len(written) != 1 else ''} to {escape(str(directory))}",
              highlight=False)
    return directory


def write_tables(table: report.TableData, summary: pd.DataFrame, directory: Path, formats: list[str]) -> list[Path]:
    """Write table.<ext> for each format; return the paths."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for fmt in formats:
            path = directory / f"table.{report.EXTENSIONS[fmt]}"
            atomic_write(path, render.render(table, fmt, summary))
            paths.append(path)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write to {directory}: {exc}") from exc
    return paths
