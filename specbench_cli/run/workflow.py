"""What `specbench run` does between parsing and printing: load, create/open the run folder,
run with a progress bar, survive Ctrl-C, summarise."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Optional

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from specbench_cli.config.fields import RunConfig
from specbench_cli.config.manifest import manifest_config
from specbench_cli.console import err
from specbench_cli.errors import RuntimeFailure
from specbench_cli.models.load import declared_context
from specbench_cli.models.prompting import default_threads, set_threads
from specbench_cli.run import limits
from specbench_cli.run.auto.calibrate import adaptive_instances, auto_instances, calibration_questions, prepare
from specbench_cli.run.plan import auto_candidates, load_questions, plan_methods
from specbench_cli.run.resume import retry_error_rows
from specbench_cli.run.runner import Runner
from specbench_cli.store.conditions import LoadWatch, busy_reason
from specbench_cli.store.runfolder import RunFolder, check_output_dir, environment, now_iso


class RunProgress(Progress):
    """The progress bar, with live tok/s and #MAT per method on the lines below it."""

    stats = ""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.stats:
            yield Text(self.stats, style="dim")


def execute(cfg: RunConfig, store: Optional[RunFolder] = None, report: bool = True,
            trust_remote_code: bool = False, retry_errors: bool = False, planned: Optional[dict] = None) -> Path:
    """Run `cfg` into a new run folder, or continue `store`; the folder is locked while written.
    `planned`: the method instances `check_config` already planned (planned here when None)."""
    with contextlib.ExitStack() as locks:
        return _execute(cfg, store, report, trust_remote_code, retry_errors, locks, planned)


def _note(msg: str) -> None:
    err.print(f"[yellow]note:[/] {escape(msg)}", highlight=False)


def _warn(msg: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(msg)}", highlight=False, soft_wrap=True)


def resume_checks(store: RunFolder, cfg: RunConfig) -> None:
    """What `--resume` says and does before it continues (the lock held): the reader's warnings
    (a torn last line, duplicate rows), and rows recorded at another batch size than the run's
    dropped so they run again (kept, they were reused as this run's answers and a report showed
    a phantom row at that batch size)."""
    for line in store.warnings():
        _warn(line)
    other = store.drop_rows(lambda row: row.get("batch_size", 1) != cfg.decoding.batch_size)
    if other:
        _warn(f"{store.samples_path}: dropped {other} row(s) recorded at another batch size than the run's "
              f"{cfg.decoding.batch_size}; they run again")


# ~60 lines: the ordered checks before the model loads, the lock, the manifest and the progress bar
# must happen in this order in one place; each step is a call.
def _execute(cfg: RunConfig, store: Optional[RunFolder], report: bool, trust_remote_code: bool,
             retry_errors: bool, locks: contextlib.ExitStack, planned: Optional[dict]) -> Path:
    from specbench_cli.models.load import load_model

    questions = load_questions(cfg)           # bad input fails before the model loads
    if planned is None:
        planned = plan_methods(cfg)           # so do bad method options
    largest = limits.largest_budget(cfg, planned, auto_candidates(cfg))
    limits.check_declared(cfg, declared_context(cfg.model.name), largest)  # and lengths the model's header rules out
    limits.check_batch_before_load(cfg, questions, largest)  # and a batch whose KV cache the machine cannot hold
    if store is None:
        check_output_dir(cfg.output.dir)      # and an --output-dir that is a file or read-only
    else:                                     # and a run folder another process is writing
        locks.enter_context(store.lock(_note))
        resume_checks(store, cfg)
        if retry_errors:
            err.print(f"--retry-errors: {retry_error_rows(store)} row(s) will run again")
    if auto_instances(cfg, planned) or adaptive_instances(cfg, planned):  # and auto/adaptive without
        calibration_questions(cfg, questions, cfg.budget.auto_questions)         # calibration questions
    threads = set_threads(cfg.model.threads, default_threads())
    err.print(f"[dim]loading {cfg.model.name} ({cfg.model.dtype}, {cfg.model.device}, {threads} threads, forward {cfg.model.forward})[/dim]")
    lm = load_model(cfg.model.name, device=cfg.model.device, dtype=cfg.model.dtype, forward=cfg.model.forward, target=cfg.model.target,
                    trust_remote_code=trust_remote_code, kernels=cfg.model.kernels,
                    note=lambda text: err.print(f"[dim]{text}[/dim]"))
    if lm.forward != cfg.model.forward:
        err.print(f"[dim]forward {cfg.model.forward}: {lm.forward}[/dim]")
    limits.check_batch_loaded(cfg, questions, lm, largest)  # the same with exact prompt lengths
    # the cost curve (recorded when cached; measured when `auto` needs it) and auto budgets
    planned, costs = prepare(cfg, lm, planned, questions, threads, store.read_manifest() if store else None)
    runner = Runner(cfg, store)  # store set below
    runner.setup(lm, planned)
    limits.check_prompts(questions, runner.prompter, runner.room)  # a first turn that cannot fit: before decoding
    if store is None:
        manifest = {"config": {**manifest_config(cfg), "threads": threads,
                               "methods": list(runner.methods)},
                    "model": lm.manifest(), **environment(), **costs,
                    "methods": {n: {"label": runner.instances[n].row_label(m.label(), cfg.budget.block_complexity), "params": m.params(),
                                    "lossless": m.lossless, "extra_params": m.extra_params,
                                    "block_complexity": m.ctx.budget} for n, m in runner.methods.items()}}
        store = RunFolder.create(Path(cfg.output.dir), manifest)
        locks.enter_context(store.lock(_note))
    else:
        store.repair_tail()
    runner.store = store
    err.print(f"run folder: [bold]{store.path}[/bold]  ({len(questions)} questions x {len(runner.methods)} methods"
              f", BC={cfg.budget.block_complexity}{f', batch size {cfg.decoding.batch_size}' if cfg.decoding.batch_size > 1 else ''}"
              f", max {cfg.decoding.max_new_tokens} new tokens)")

    watch, started = LoadWatch(threads), now_iso()
    clock = time.monotonic()

    def eta(done: int, total: int) -> str:
        """', eta M:SS' from the pace so far (units differ in length: a rough guide)."""
        if not total or done >= total:
            return ""
        left = (time.monotonic() - clock) / done * (total - done)
        return f", eta {int(left // 60)}:{int(left % 60):02d}"
    runner.on_row = lambda row, live: watch.sample()
    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with RunProgress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("decoding", total=None)

        def on_progress(done: int, total: int) -> None:
            bar.stats = runner.live.line().replace(" | ", "\n")
            bar.update(task, completed=done, total=total)
            if not err.is_terminal and done:  # logs (CI, nohup) get one plain line per finished unit
                err.print(f"[{done}/{total}{eta(done, total)}] {runner.live.line()}", highlight=False, soft_wrap=True)

        try:
            errors = runner.run(questions, progress=on_progress)
        except KeyboardInterrupt:
            bar.stop()
            err.print(f"[yellow]interrupted[/yellow]: finished rows are kept in {store.samples_path}; "
                      f"continue with: specbench run --resume {store.path}")
            _record_conditions(store, watch, started)
            raise
    _record_conditions(store, watch, started, finished=True)
    if report:
        summarize(store.path)
    if errors:
        raise RuntimeFailure(f"{errors} sample(s) failed; see rows with status 'error' in {store.samples_path}")
    return store.path


def _record_conditions(store: RunFolder, watch: LoadWatch, started: str, finished: bool = False) -> None:
    """Append this decoding session's load record to the manifest (and the finish time)."""
    manifest = store.read_manifest()
    records = list(manifest.get("timing_conditions") or []) + [watch.record(started, now_iso())]
    store.update_manifest(timing_conditions=records, **({"finished": now_iso()} if finished else {}))
    reason = busy_reason({"timing_conditions": records[-1:]})
    if reason:
        _note(f"the machine was busy while this run was timed ({reason}): its speedups are not those of a "
              f"quiet machine")


def summarize(run_dir: Path) -> None:
    """Print the summary table and write table files + plots to RUN_DIR/report."""
    from specbench_cli.report.runs import write_report

    write_report([run_dir])
