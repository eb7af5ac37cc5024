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
    """Spec-Bench table (speedup per category, #MAT, tok/s, answer quality) plus figures, from result folders;
    from a load run folder, its load report (docs/load-report.md)."""
    from specbench_cli.report.runs import write_html_report, write_report

    if html and fmt is not None:
        raise UsageError("--html writes a page, --format a table file: choose one")
    if output is not None:
        (check_output_file if html else check_output_folder)(output, "--output")
    if _load_runs(run_dirs):
        return _report_load(run_dirs, fmt, output, columns, not no_plots, html)
    if execute_code:
        from specbench_cli.scoring.sandbox import missing_layers

        if missing := missing_layers():  # said before any model-written code runs
            err.print(f"[yellow]warning:[/] the sandbox for model-written code runs without: {', '.join(missing)} "
                      f"(this kernel does not provide them; docs/reliability.md)", highlight=False)
    if html:
        write_html_report(run_dirs, output=output, columns=columns, plots=not no_plots, execute_code=execute_code)
    else:
        write_report(run_dirs, fmt=fmt, output=output, columns=columns, plots=not no_plots, execute_code=execute_code)


def _load_runs(run_dirs: List[Path]) -> bool:
    """Whether the folders are a load run (`specbench load`); a UsageError for a load run among
    others (a load run is reported on its own)."""
    from specbench_cli.report.load import is_load_run

    kinds = [is_load_run(d) for d in run_dirs]
    if any(kinds) and len(run_dirs) > 1:
        raise UsageError("a load run is reported on its own: give one load run folder "
                         f"({', '.join(str(d) for d, k in zip(run_dirs, kinds) if k)})")
    return any(kinds)


def _report_load(run_dirs: List[Path], fmt: Optional[str], output: Optional[Path], columns: str, plots: bool,
                 html: bool) -> None:
    from specbench_cli.report.load_report import write_load_html, write_load_report
    from specbench_cli.report.runs import report_folder

    if columns.strip():
        raise UsageError("--columns chooses columns of the Spec-Bench table; a load run's table has its own")
    if fmt is not None:
        formats.get(fmt)  # an unknown format is refused before anything is read
    if html:
        write_load_html(run_dirs[0], output or report_folder(run_dirs[0]) / "report.html", plots=plots)
    else:
        write_load_report(run_dirs[0], output or report_folder(run_dirs[0]), fmt=fmt, plots=plots)


def check_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    baseline: Optional[Path] = typer.Option(None, "--baseline", "-b", help="Baseline JSON from `specbench baseline` "
                                            "(a load run: that JSON, or a load run folder)."),
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
    min_speedup: List[str] = typer.Option([], "--min-speedup", metavar="POINT[:METHOD]=VALUE", help="Load runs: "
                                          "fail when the whole bootstrap interval of a method's speedup at a load "
                                          "point lies below VALUE (POINT * for every point; repeatable)."),
) -> None:
    """CI gate: exit 0 within tolerance, 1 on regression, 2 on bad input (including a baseline
    with no entries or one made from another suite, model or settings). Speed: a paired bootstrap
    over questions; greedy float32: every question's accepted lengths exactly (docs/ci-gate.md). A load run:
    per load point, against a baseline load run and/or --min-speedup thresholds (docs/load-report.md)."""
    for name, tol in (("--mat-tol", mat_tol), ("--speedup-tol", speedup_tol)):
        if tol is not None and not (math.isfinite(tol) and tol >= 0):
            raise UsageError(f"{name} must be a finite number >= 0, got {tol}")
    if not (math.isfinite(confidence) and 0 < confidence < 1):
        raise UsageError(f"--confidence must be between 0 and 1, got {confidence}")
    if resamples < 100:
        raise UsageError(f"--resamples must be at least 100, got {resamples}")
    if seed < 0:
        raise UsageError(f"--seed must be >= 0, got {seed}")
    if _load_runs([run_dir]):
        return _check_load(run_dir, baseline, min_speedup, speedup_tol, confidence, resamples, seed)
    if min_speedup:
        raise UsageError("--min-speedup gates a load run's speedup at a load point; this is not a load run")
    if baseline is None:
        raise UsageError("check needs --baseline (a JSON from `specbench baseline`)")
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


def _check_load(run_dir: Path, baseline: Optional[Path], min_speedup: List[str], speedup_tol: Optional[float],
                confidence: float, resamples: int, seed: int) -> None:
    """`check` of a load run (report/load_gate.py): against a baseline load run or its JSON, and/or
    thresholds on the speedup at load points."""
    from specbench_cli.report import load as load_metrics
    from specbench_cli.report import load_gate

    thresholds = [load_gate.parse_threshold(t) for t in min_speedup]
    if baseline is None and not thresholds:
        raise UsageError("check of a load run needs --baseline (a load run folder or its `specbench baseline` JSON) "
                         "or --min-speedup POINT[:METHOD]=VALUE")
    tolerance = load_gate.DEFAULT_TOLERANCE if speedup_tol is None else speedup_tol
    run = load_metrics.load_run(run_dir)
    for warning in run.warnings:
        out.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    failures: list[str] = []
    compared = 0
    if baseline is not None:
        base_settings, base_pairs = load_gate.read_baseline(baseline)
        differences = load_gate.mismatches(base_settings, load_gate.settings(run))
        if differences:
            raise UsageError(f"{baseline} was not made from a run like {run_dir}: {'; '.join(differences)}")
        now_pairs = load_gate.paired_requests(run)
        verdicts = load_gate.judge_speed(base_pairs, now_pairs, tolerance, confidence, resamples, seed)
        if not verdicts:
            raise UsageError(f"check compared nothing: {baseline} and {run_dir} share no paired request at any "
                             f"load point (the same point, method, request index and question)")
        compared += len(verdicts)
        out.print(load_gate.speed_table(verdicts, confidence, tolerance))
        failures += [f"{v.method} at {v.point}: speedup {v.base:.2f} → {v.now:.2f}, change {v.change:+.1%} "
                     f"[{v.low:+.1%}, {v.high:+.1%}] wholly below -{tolerance:.0%}" for v in verdicts
                     if v.verdict == "slower"]
        failures += load_gate.equality_failures(base_pairs, now_pairs)
    if thresholds:
        summary = load_metrics.point_summary(run, resamples, confidence, seed)
        results, unmatched = load_gate.judge_thresholds(summary, thresholds)
        if unmatched:
            raise UsageError(f"--min-speedup matched no speculative method with a speedup at a point: "
                             f"{', '.join(unmatched)}")
        compared += len(results)
        for r in results:
            line = load_gate.threshold_line(r)
            if r.failed:
                failures.append(line)
            else:
                out.print(f"[green]ok[/] {escape(line)}", highlight=False)
    for line in failures:
        out.print(f"[red]FAIL[/] {escape(line)}", highlight=False)
    if failures:
        out.print(f"[red]{len(failures)} check(s) failed[/] (speedup tolerance -{tolerance:.0%}, "
                  f"{confidence:.0%} intervals).")
        raise typer.Exit(1)
    out.print(f"[green]ok:[/] {compared} load check(s) within tolerance.")


def baseline_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR"),
    output: Path = typer.Option(..., "--output", "-o", help="Baseline JSON file to write."),
) -> None:
    """Write a baseline (#MAT, speedup, n per model, method, BC and category) for `check`."""
    check_output_file(output, "--output")
    if _load_runs([run_dir]):
        import json

        from specbench_cli.atomic import atomic_write
        from specbench_cli.report import load as load_metrics
        from specbench_cli.report.load_gate import baseline_document

        doc = baseline_document(load_metrics.load_run(run_dir))
        if not doc["requests"]:
            raise UsageError(f"{run_dir} has no paired request of a speculative method to make a baseline of")
        atomic_write(output, json.dumps(doc, indent=1) + "\n")
        err.print(f"wrote {len(doc['requests'])} paired requests to {escape(str(output))}", highlight=False)
        return
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

    if _load_runs([run_a]) or _load_runs([run_b]):
        raise UsageError("compare reads result folders; for load runs use `specbench check NEW --baseline OLD`")
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
    if _load_runs([run_dir]):
        raise UsageError(f"{run_dir} is a load run: it has no Spec-Bench answer files to export")
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
