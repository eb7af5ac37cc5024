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
from specbench_cli.errors import RuntimeFailure, UsageError, check_not_link
from specbench_cli.report import formats as report_formats
from specbench_cli.report import metrics, render, turns
from specbench_cli.report import table as report
from specbench_cli.store.conditions import busy_reason, machine_line
from specbench_cli.store.runfolder import Run, all_rows, load_runs


def load(paths: List[Path]) -> tuple[list[Run], list[dict]]:
    """Load run folders, print their load warnings, and return (runs, tagged rows); rows of
    several temperatures carry theirs in the method label (`metrics.label_temperatures`)."""
    runs = load_runs(paths)
    for run in runs:
        for warning in run.warnings:
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)  # one line each
    rows = metrics.label_temperatures(all_rows(runs))
    if not rows:
        where = ', '.join(str(p) for p in paths)
        if any(run.warnings for run in runs):
            raise UsageError(f"no readable row in {where}: every line of samples.jsonl is damaged (named above)")
        raise UsageError(f"no rows in {where} (nothing has finished yet?)")
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

    if fmt is not None:
        report_formats.get(fmt)  # an unknown format is refused before anything is read
    directory = output or report_folder(run_dirs[0])  # a planted link: refused before any work
    runs, rows, summary = summary_of(run_dirs)
    table = main_table(rows, summary, columns, execute_code)
    busy = busy_runs(runs)
    table.notes += machine_notes(runs) + busy_notes(busy)
    extras = extra_tables(rows, summary)
    written = write_tables(table, summary, directory, [fmt] if fmt else report_formats.names(), extras)
    per_turn = turns.turn_summary(rows) if fmt is None else []  # --format: table.<ext> only
    turn_table = turns.turn_table(per_turn) if len(per_turn) else None
    if turn_table is not None:
        written += write_tables(turn_table, per_turn, directory, report_formats.names(), stem=turns.FILE_STEM)
    # time.<ext>, temperature.<ext>: files of their own (like turns, not with --format: table.<ext> only)
    own_files = time_tables(runs, rows, summary) if fmt is None else []
    for stem, extra in own_files:
        written += write_tables(extra, summary, directory, report_formats.names(), stem=stem)
    if fmt:
        typer.echo(render.render(table, fmt, summary, extras), nl=False)
    else:
        report.print_table(table)
        for extra in extras:  # the terminal's acceptance table stops at TERMINAL_POSITIONS
            if extra.title == report.ACCEPTANCE_TITLE:
                extra = report.acceptance_table(summary, TERMINAL_POSITIONS)
            report.print_table(extra)
        if turn_table is not None:
            report.print_table(turn_table)
        for stem, extra in own_files:
            if stem == "time":
                from specbench_cli.report.timing import terminal_table

                extra = terminal_table(extra)
            report.print_table(extra)
    for run, why in busy:
        err.print(f"[yellow]warning:[/] {escape(run.run_id)} was timed on a busy machine ({why}): its speedups "
                  f"are not a quiet machine's", highlight=False)
    from specbench_cli.report.batch import write_batch_report

    batch_table, batch_files = write_batch_report(rows, directory, [fmt] if fmt else report_formats.names(), plots)
    written += batch_files
    if batch_table is not None and not fmt:
        report.print_table(batch_table)
    if plots:
        from specbench_cli.report import plots as figures  # matplotlib only when figures are wanted

        written += figures.write_plots(rows, summary, directory)
    err.print(f"wrote {len(written)} file{'s' if len(written) != 1 else ''} to {escape(str(directory))}",
              highlight=False)
    return directory


def report_folder(run_dir: Path) -> Path:
    """RUN/report, the default output folder; a UsageError when it is a symbolic link (a run folder
    from elsewhere may carry `report -> /some/folder`, and every table would be written there)."""
    return check_not_link(Path(run_dir) / "report")


def main_table(rows: list[dict], summary: pd.DataFrame, columns: str, execute_code: bool) -> report.TableData:
    """The Spec-Bench table with Median, =AR, the `columns` asked for and the quality columns."""
    from specbench_cli.scoring.quality import quality_summary

    try:
        return report.spec_bench_table(summary, [*report.DEFAULT_COLUMNS, *columns.split(",")],
                                       quality_summary(rows, execute_code))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def write_html_report(run_dirs: List[Path], output: Optional[Path] = None, columns: str = "", plots: bool = True,
                      execute_code: bool = False) -> Path:
    """Write the self-contained HTML report (report/html.py) to `output` (default: first run's
    report/report.html); return its path."""
    from specbench_cli.models.load import load_tokenizer
    from specbench_cli.report import html

    path = output or report_folder(run_dirs[0]) / "report.html"  # a planted link: refused before any work
    runs, rows, summary = summary_of(run_dirs)
    table = main_table(rows, summary, columns, execute_code)
    busy = busy_runs(runs)
    table.notes += machine_notes(runs) + busy_notes(busy)
    figures = []
    if plots:
        from specbench_cli.report import plots as drawing

        figures = drawing.svg_figures(rows, summary)
    sources, notes = html.piece_source(runs, load_tokenizer)
    for note in notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    own = [t for _, t in time_tables(runs, rows, summary)]
    text = html.page(runs, [table, *extra_tables(rows, summary), *own], figures, html.viewer_data(runs, sources),
                     notes, [f"{run.run_id}: {why}" for run, why in busy])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {path}: {exc}") from exc
    for run, why in busy:
        err.print(f"[yellow]warning:[/] {escape(run.run_id)} was timed on a busy machine ({why}): its speedups "
                  f"are not a quiet machine's", highlight=False)
    err.print(f"wrote {escape(str(path))}", highlight=False)
    return path


TERMINAL_POSITIONS = 6  # draft positions the terminal's acceptance table shows (the files show all)


def machine_notes(runs: list[Run]) -> list[str]:
    """One line per machine the runs were timed on (CPU, instruction-set flags, threads, dtype, forward)."""
    return list(dict.fromkeys(f"{run.run_id}: {machine_line(run.manifest)}" if len(runs) > 1
                              else machine_line(run.manifest) for run in runs))


def busy_notes(busy: list[tuple[Run, str]]) -> list[str]:
    return [f"timed on a busy machine: {run.run_id} ({why}); its speedups are not a quiet machine's" for run, why in busy]


def time_tables(runs: list[Run], rows: list[dict], summary: pd.DataFrame) -> list[tuple[str, report.TableData]]:
    """(file stem, table): where each method's decode time goes with its predicted, measured and
    oracle speedup (report/timing.py), and #MAT by temperature when the rows hold several."""
    from specbench_cli.report import timing

    tables = [(timing.FILE_STEM, timing.time_table(rows, summary, {run.run_id: run.manifest for run in runs})),
              (timing.TEMPERATURE_STEM, timing.temperature_table(rows))]
    return [(stem, t) for stem, t in tables if t is not None]


def extra_tables(rows: list[dict], summary: pd.DataFrame) -> list[report.TableData]:
    """The tables after the main one: acceptance per draft position, and speedup by difficulty
    where the questions have one."""
    tables = [report.acceptance_table(summary), report.difficulty_table(rows)]
    return [t for t in tables if t is not None]


def write_tables(table: report.TableData, summary: pd.DataFrame, directory: Path, formats: list[str],
                 extras: list[report.TableData] = (), stem: str = "table") -> list[Path]:
    """Write <stem>.<ext> for each format (`extras` after the main table); return the paths."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for fmt in formats:
            path = directory / f"{stem}.{report_formats.get(fmt).extension}"
            atomic_write(path, render.render(table, fmt, summary, extras))
            paths.append(path)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write to {directory}: {exc}") from exc
    return paths
