"""Commands that read result folders: report, check, baseline, compare, export.

`app.py` calls `register(app)`. Commands only parse, call plain functions (`reporting`,
`baseline`, `export`) and print. They raise `UsageError` (exit 2) for bad input; `check`
exits 1 through `typer.Exit(1)` after printing what regressed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from specbench_cli.console import err, out
from specbench_cli.errors import UsageError, check_output_file, check_output_folder
from specbench_cli.report import formats

# The work behind these commands (pandas, matplotlib) is imported inside each command, so
# that `specbench run` with a bad option, which never reaches them, does not pay for it.


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
        None, "--format", "-f", help=f"{'|'.join(formats.BUILTIN)} (or a format a package registers: specbench list "
        "formats): write only table.<ext> and print it instead of the terminal table."
    ),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output folder [default: first RUN_DIR/report]; "
                                          "with --html the page's file."),
    columns: str = typer.Option("", "--columns", help="Extra columns, comma-separated: bc, mbsu, params, alpha (KOALA's 1-/2-/3-alpha of chain drafters). Median (median paired speedup) and =AR (share of outputs equal to AR) are always shown, as in the table at the end of `run`."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures."),
    html: bool = typer.Option(False, "--html", help="Write one self-contained HTML page instead (no network): the "
                              "tables, figures, conditions and every answer coloured token by token by the "
                              "verification step that produced it; -o names the file [default: first "
                              "RUN_DIR/report/report.html]."),
    execute_code: bool = typer.Option(False, "--execute-code", help="Run model-written code to score it (HumanEval pass@1): each program in its own sandboxed subprocess (docs/metrics.md). Off by default."),
) -> None:
    """Spec-Bench table (speedup per category, #MAT, tok/s, answer quality) plus figures, from result folders."""
    from specbench_cli.report.runs import write_html_report, write_report

    if html and fmt is not None:
        raise UsageError("--html writes a page, --format a table file: choose one")
    if output is not None:
        (check_output_file if html else check_output_folder)(output, "--output")
    if execute_code:
        from specbench_cli.scoring.sandbox import missing_layers

        if missing := missing_layers():  # said before any model-written code runs
            err.print(f"[yellow]warning:[/] the sandbox for model-written code runs without: {', '.join(missing)} "
                      f"(this kernel does not provide them; docs/reliability.md)", highlight=False)
    if html:
        write_html_report(run_dirs, output=output, columns=columns, plots=not no_plots, execute_code=execute_code)
    else:
        write_report(run_dirs, fmt=fmt, output=output, columns=columns, plots=not no_plots, execute_code=execute_code)


def check_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    baseline: Path = typer.Option(..., "--baseline", "-b", help="Baseline JSON from `specbench baseline`."),
    mat_tol: float = typer.Option(0.02, "--mat-tol", help="Allowed relative #MAT change per entry, either way."),
    speedup_tol: Optional[float] = typer.Option(
        None, "--speedup-tol", help="The slowdown the gate must be sure of: fail only when the whole bootstrap "
        "interval of the change of a method's mean paired speedup lies below -TOL. Default 0.05; baselines "
        "without per-question data (older versions) compare each entry's speedup as one number, default 0.25."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence of the bootstrap interval."),
    resamples: int = typer.Option(10_000, "--resamples", help="Bootstrap resamples of the questions."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap (the same seed, the same interval)."),
    allow_busy: bool = typer.Option(False, "--allow-busy", help="Judge speed even from a run timed while the "
                                    "machine was busier than the run's own threads (refused otherwise)."),
) -> None:
    """CI gate: exit 0 within tolerance, 1 on regression, 2 on bad input (including a baseline
    with no entries or one made from another suite, model or settings). Speed: a paired bootstrap
    over questions; greedy float32: every question's accepted lengths exactly (docs/ci-gate.md)."""
    for name, tol in (("--mat-tol", mat_tol), ("--speedup-tol", speedup_tol)):
        if tol is not None and not (math.isfinite(tol) and tol >= 0):
            raise UsageError(f"{name} must be a finite number >= 0, got {tol}")
    if not (math.isfinite(confidence) and 0 < confidence < 1):
        raise UsageError(f"--confidence must be between 0 and 1, got {confidence}")
    if resamples < 100:
        raise UsageError(f"--resamples must be at least 100, got {resamples}")
    if seed < 0:
        raise UsageError(f"--seed must be >= 0, got {seed}")
    from specbench_cli.report import gate
    from specbench_cli.report.baseline import diff_table, judge, mismatches, nothing_compared, read_baseline
    from specbench_cli.report.runs import busy_runs, summary_of

    doc = read_baseline(baseline)
    entries = doc["entries"]
    runs, rows, summary = summary_of([run_dir])
    differences = mismatches(doc, runs[0], rows)
    if differences:
        raise UsageError(f"{baseline} was not made from a run like {run_dir}: {'; '.join(differences)}")
    for run, why in busy_runs(runs):
        if not allow_busy:
            raise UsageError(f"{run_dir} was timed on a busy machine ({why}): its speedups cannot be judged; "
                             f"run it again on a quiet machine, or pass --allow-busy")
        out.print(f"[yellow]note:[/] {run_dir} was timed on a busy machine ({why}); judged anyway (--allow-busy)")
    why = nothing_compared(summary, entries)
    if why:
        raise UsageError(f"check compared nothing: {why} ({baseline} vs {run_dir})")
    result = judge(doc, runs[0], rows, summary, mat_tol, speedup_tol, confidence, resamples, seed)
    for note in result.notes:
        out.print(f"[yellow]note:[/] {escape(str(baseline))}: {escape(note)}", highlight=False)
    if result.moved:
        out.print(diff_table(result.moved))
    if result.verdicts:
        out.print(gate.speed_table(result.verdicts, confidence, result.tolerance))
    for line in result.failures:
        out.print(f"[red]FAIL[/] {escape(line)}", highlight=False)
    if result.failed:
        parts = ([f"{result.regressions} of {len(entries)} baseline entries regressed"] if result.regressions else []) \
            + ([f"{len(result.failures)} statistical or exact check(s) failed"] if result.failures else [])
        out.print(f"[red]{'; '.join(parts)}[/] (#MAT tolerance ±{mat_tol:.0%}, speedup tolerance "
                  f"-{result.tolerance:.0%}).")
        raise typer.Exit(1)
    out.print(f"[green]ok:[/] {len(entries)} baseline entries within tolerance.")


def baseline_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    output: Path = typer.Option(..., "--output", "-o", help="Baseline JSON file to write."),
) -> None:
    """Write a baseline (#MAT, speedup, n per model, method, BC and category) for `check`."""
    check_output_file(output, "--output")
    from specbench_cli.report.baseline import write_baseline
    from specbench_cli.report.runs import summary_of

    runs, rows, summary = summary_of([run_dir])
    if summary.empty:
        raise UsageError(f"{run_dir} has no finished rows to make a baseline of")
    doc = write_baseline(summary, runs, rows, output)
    err.print(f"wrote {len(doc['entries'])} baseline entries to {escape(str(output))}", highlight=False)


def compare_command(
    run_a: Path = typer.Argument(..., metavar="RUN_A"),
    run_b: Path = typer.Argument(..., metavar="RUN_B"),
) -> None:
    """Run A vs run B side by side: speedup, #MAT and tok/s per category with relative change."""
    from specbench_cli.report import table as report
    from specbench_cli.report.runs import summary_of

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
    from specbench_cli.report import metrics
    from specbench_cli.report.export import EXPORT_FORMATS, spec_bench_answers, write_answers
    from specbench_cli.report.runs import load

    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"unknown export format '{fmt}'; choose from {', '.join(EXPORT_FORMATS)}")
    check_output_folder(output, "--output")
    _, rows = load([run_dir])
    files, skipped = spec_bench_answers(rows)
    if not files:  # an empty folder would look like a successful export
        raise UsageError(f"{run_dir}: nothing to export: all {skipped} question(s) have an errored or missing turn")
    if not any(row["method"] == metrics.AR_METHOD for row in rows):
        err.print("[yellow]warning:[/] no `ar` rows: Spec-Bench's speed.py needs an AR baseline file")
    if skipped:
        err.print(f"[yellow]warning:[/] left out {skipped} question(s) with an errored or missing turn")
    write_answers(files, output)
    for name, lines in files.items():
        out.print(f"{escape(str(output / name))}: {len(lines)} questions", highlight=False)
