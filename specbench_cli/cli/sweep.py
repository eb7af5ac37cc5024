"""`specbench sweep GRID.toml`: expand a grid into jobs, run them here or on Ray, merge one report.

Layout of a sweep folder (default: sweeps/<grid file name without .toml>):
    sweep.lock            held while a sweep runs in this folder
    sweep.json            the grid and every job's state, run folder, attempts and seconds
    jobs/<job id>/        job.json, job.log, attempts.jsonl and the job's run folder
    report/               `specbench report` over every finished job (tables and figures)
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from specbench_cli.console import err, out
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.store.lock import SweepLock
from specbench_cli.sweep import backends, merge
from specbench_cli.sweep import jobs as jobmod
from specbench_cli.sweep.grid import DEFAULT_MAX_JOBS, MAX_JOBS, Job, expand, load_grid

# Dry-run estimate when no job of the sweep has finished yet: the default 18-question run
# (21 question-turns x 6 methods x 128 tokens = 16k budgeted tokens) took 11 min on this 2-core
# CPU with SmolLM2-135M in float32, about 25 budgeted tokens/s, plus model load and warm-up.
ASSUMED_TOKENS_PER_S = 25.0
ASSUMED_STARTUP_S = 15.0
MAX_PARALLEL = 1024   # --jobs: local worker processes at once
MAX_RETRIES = 100     # --retries per job


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_command)


def sweep_command(
    grid_file: Path = typer.Argument(..., metavar="GRID.toml", help="Grid: models, methods, bcs, dtypes, tasks, ..."),
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", "-o", help="Sweep folder [default: sweeps/<grid name>]."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Jobs at once on this machine (ignored with --ray-address)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run on a Ray cluster: auto or HOST:PORT."),
    cpus_per_job: Optional[float] = typer.Option(None, "--cpus-per-job", help="Ray CPUs per job [default: the grid's threads]."),
    gpus_per_job: float = typer.Option(0.0, "--gpus-per-job", help="Ray GPUs per job (set device = \"cuda\" in the grid)."),
    retries: int = typer.Option(2, "--retries", help="Extra attempts for a job that failed (each resumes its run folder)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the jobs and an estimated duration; run nothing."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not merge the report at the end."),
    max_jobs: int = typer.Option(DEFAULT_MAX_JOBS, "--max-jobs", help=f"Refuse a grid that expands to more jobs "
                                 f"(at most {MAX_JOBS})."),
) -> None:
    """Run a grid of models x method sets x BCs x dtypes x task shards as jobs; merge one report."""
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {jobs})")
    if jobs > MAX_PARALLEL:
        raise UsageError(f"--jobs must be at most {MAX_PARALLEL} (got {jobs})")
    if max_jobs < 1:
        raise UsageError(f"--max-jobs must be at least 1 (got {max_jobs})")
    if max_jobs > MAX_JOBS:  # the cap itself is bounded: a grid is expanded in memory before it runs
        raise UsageError(f"--max-jobs must be at most {MAX_JOBS} (got {max_jobs}); split the grid into several")
    if not 0 <= retries <= MAX_RETRIES:
        raise UsageError(f"--retries must be between 0 and {MAX_RETRIES} (got {retries})")
    if gpus_per_job < 0 or (cpus_per_job is not None and cpus_per_job <= 0):
        raise UsageError("--cpus-per-job must be > 0 and --gpus-per-job >= 0")
    if ray_address is not None:
        backends.require_ray()
    grid = load_grid(grid_file)
    if gpus_per_job > 0 and not grid.device.startswith("cuda"):
        raise UsageError(f"{grid_file}: --gpus-per-job needs device = \"cuda\" in the grid (it is '{grid.device}')")
    from specbench_cli.sweep.questions import check_methods, selector

    check_methods(grid)
    job_list = expand(grid, selector(grid), max_jobs)
    sweep_dir = (output_dir or Path("sweeps") / grid_file.stem).resolve()
    if dry_run:
        show_plan(job_list, sweep_dir, jobs if ray_address is None else None)
        return
    with SweepLock(sweep_dir, note=lambda msg: err.print(f"[yellow]note:[/] {escape(msg)}", highlight=False)):
        results = run_all(job_list, sweep_dir, grid_file, jobs, ray_address,
                          cpus_per_job or float(grid.threads), gpus_per_job, retries)
        finished = [r for r in results if r["status"] == "finished"]
        if finished and not no_report:
            runs = [r["run"] for r in finished]
            if merge.merge(sweep_dir, runs) != 0:
                raise RuntimeFailure(f"merging the report failed (specbench report {' '.join(runs[:2])} ...)")
    conclude(job_list, results, sweep_dir)


def run_all(job_list: list[Job], sweep_dir: Path, grid_file: Path, jobs: int, ray_address: Optional[str],
            cpus: float, gpus: float, retries: int) -> list[dict]:
    """Run every job (finished ones are skipped inside `run_job`); write sweep.json as they end."""
    results: dict[str, dict] = {}
    payloads = [{"id": j.id, "settings": j.settings, "args": j.args} for j in job_list]
    names = {j.id: j.describe() for j in job_list}
    merge.write_status(sweep_dir, grid_file, job_list, results)
    where = f"Ray cluster {ray_address}" if ray_address else f"this machine, {jobs} at a time"
    err.print(f"sweep folder: [bold]{escape(str(sweep_dir))}[/bold]  ({len(job_list)} jobs on {escape(where)})",
              highlight=False)
    count = {"done": 0}

    def on_result(result: dict, again: bool) -> None:
        label = escape(names[result["id"]])
        if again:
            err.print(f"[yellow]retry[/] {label}: attempt {result['attempt']} failed "
                      f"({escape(result['error'])}); trying again (a half-done run folder is resumed)", highlight=False)
            return
        results[result["id"]] = result
        count["done"] += 1
        state = {"finished": "[green]skipped (already finished)[/]" if result["skipped"] else
                 f"[green]done[/] in {result['seconds']:.0f} s", "usage": "[red]bad input[/]",
                 "failed": "[red]failed[/]"}[result["status"]]
        extra = f" ({escape(result['error'])})" if result["status"] != "finished" else ""
        err.print(f"[{count['done']}/{len(job_list)}] {label}: {state}{extra}", highlight=False)
        merge.write_status(sweep_dir, grid_file, job_list, results)

    if ray_address:
        backends.run_ray(payloads, str(sweep_dir), ray_address, cpus, gpus, retries, on_result)
    else:
        backends.run_local(payloads, str(sweep_dir), jobs, retries, on_result)
    return [results[j.id] for j in job_list]


def conclude(job_list: list[Job], results: list[dict], sweep_dir: Path) -> None:
    """Exit 2 if a job had bad input, 1 if one failed or wrote error rows, else 0."""
    bad = [r for r in results if r["status"] == "usage"]
    failed = [r for r in results if r["status"] == "failed"]
    error_rows = sum(r.get("errors") or 0 for r in results if r["status"] == "finished")
    if bad:
        raise UsageError(f"job {bad[0]['id']} rejected its input: {bad[0]['error']}")
    if failed:
        raise RuntimeFailure(f"{len(failed)} of {len(job_list)} jobs failed after retries (first: {failed[0]['id']}: "
                             f"{failed[0]['error']}); run the sweep again to resume them; logs in "
                             f"{sweep_dir / 'jobs'}/<job id>/job.log")
    if error_rows:
        raise RuntimeFailure(f"{error_rows} sample(s) failed inside finished jobs; see rows with status 'error'")
    err.print(f"all {len(job_list)} jobs finished; report in {escape(str(sweep_dir / 'report'))}", highlight=False)


def estimate(job_list: list[Job], sweep_dir: Path) -> tuple[float, str, list[str]]:
    """(seconds for the unfinished jobs run one at a time, the rule used, states per job).

    Rule: seconds per budgeted token (questions x turns x methods incl. AR x repeats x
    max_new_tokens) measured on this sweep's finished jobs (their wall time, model load included),
    else the assumed 25 tokens/s + 15 s start-up per job. The budget is an upper bound on tokens
    (answers may stop early at EOS), so this leans long."""
    states, done_s, done_tokens = [], 0.0, 0
    for job in job_list:
        job_dir = sweep_dir / "jobs" / job.id
        state = jobmod.job_state(job_dir)[0]
        states.append(state)
        seconds = jobmod.measured_seconds(job_dir)
        if seconds is not None:
            done_s += seconds
            done_tokens += job.tokens
    todo = [j for j, s in zip(job_list, states) if s != "finished"]
    if done_tokens and done_s > 0:
        rate = done_s / done_tokens
        rule = f"measured on {states.count('finished')} finished jobs: {1 / rate:.1f} budgeted tokens/s incl. start-up"
        return sum(j.tokens for j in todo) * rate, rule, states
    rule = (f"assumed {ASSUMED_TOKENS_PER_S:.0f} tokens/s per job + {ASSUMED_STARTUP_S:.0f} s start-up "
            f"(SmolLM2-135M, float32, 2-core CPU); budget = question-turns x methods x repeats x max_new_tokens")
    return sum(j.tokens / ASSUMED_TOKENS_PER_S + ASSUMED_STARTUP_S for j in todo), rule, states


def show_plan(job_list: list[Job], sweep_dir: Path, parallel: Optional[int]) -> None:
    """The --dry-run listing: one line per job with its state, then the estimate."""
    seconds, rule, states = estimate(job_list, sweep_dir)
    for job, state in zip(job_list, states):
        out.print(f"{state:8} {job.id}\n         {escape(job.describe())}  ({job.units} generations, "
                  f"<= {job.tokens} tokens)", highlight=False, soft_wrap=True)
    todo = sum(s != "finished" for s in states)
    text = f"{len(job_list)} jobs ({todo} to run) in {sweep_dir}; estimated {_duration(seconds)} one at a time"
    if parallel and parallel > 1:
        text += f", about {_duration(seconds / min(parallel, max(todo, 1)))} with --jobs {parallel}"
    elif parallel is None:
        text += "; divide by the number of jobs the Ray cluster runs at once"
    out.print(text, highlight=False)
    out.print(f"estimate: {rule}", highlight=False)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
