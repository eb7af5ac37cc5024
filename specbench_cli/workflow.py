"""What `specbench run` does between parsing and printing: load, create/open the run folder,
run with a progress bar, survive Ctrl-C, summarise."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from rich.text import Text
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from specbench_cli.console import err
from specbench_cli.errors import RuntimeFailure
from specbench_cli.prompting import default_threads, set_threads
from specbench_cli.runner import RunConfig, Runner, load_questions, plan_methods
from specbench_cli.runfolder import RunFolder, environment, now_iso


class RunProgress(Progress):
    """The progress bar, with live tok/s and #MAT per method on the lines below it."""

    stats = ""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.stats:
            yield Text(self.stats, style="dim")


def execute(cfg: RunConfig, store: Optional[RunFolder] = None, report: bool = True,
            trust_remote_code: bool = False) -> Path:
    from specbench_cli.models import load_model

    questions = load_questions(cfg)           # bad input fails before the model loads
    planned = plan_methods(cfg)               # so do bad method options
    threads = set_threads(cfg.threads, default_threads())
    err.print(f"[dim]loading {cfg.model} ({cfg.dtype}, {cfg.device}, {threads} threads, forward {cfg.forward})[/dim]")
    lm = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype, forward=cfg.forward,
                    trust_remote_code=trust_remote_code)
    runner = Runner(cfg, store)  # store set below
    runner.setup(lm, planned)
    if store is None:
        manifest = {"config": {**dataclasses.asdict(cfg), "threads": threads,
                               "methods": list(runner.methods)},
                    "model": lm.manifest(), **environment(),
                    "methods": {n: {"label": m.label(), "params": m.params(), "lossless": m.lossless,
                                    "extra_params": m.extra_params} for n, m in runner.methods.items()}}
        store = RunFolder.create(Path(cfg.output_dir), manifest)
    else:
        store.repair_tail()
    runner.store = store
    err.print(f"run folder: [bold]{store.path}[/bold]  ({len(questions)} questions x {len(runner.methods)} methods"
              f", BC={cfg.block_complexity}, max {cfg.max_new_tokens} new tokens)")

    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with RunProgress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("decoding", total=None)

        def on_progress(done: int, total: int) -> None:
            bar.stats = runner.live.line().replace(" | ", "\n")
            bar.update(task, completed=done, total=total)
            if not err.is_terminal and done:  # logs (CI, nohup) get one plain line per finished unit
                err.print(f"[{done}/{total}] {runner.live.line()}", highlight=False, soft_wrap=True)

        try:
            errors = runner.run(questions, progress=on_progress)
        except KeyboardInterrupt:
            bar.stop()
            err.print(f"[yellow]interrupted[/yellow]: finished rows are kept in {store.samples_path}; "
                      f"continue with: specbench run --resume {store.path}")
            raise
    store.update_manifest(finished=now_iso())
    if report:
        summarize(store.path)
    if errors:
        raise RuntimeFailure(f"{errors} sample(s) failed; see rows with status 'error' in {store.samples_path}")
    return store.path


def summarize(run_dir: Path) -> None:
    """Print the summary table and write table files + plots to RUN_DIR/report."""
    from specbench_cli.reporting import write_report

    write_report([run_dir], columns="median,agree")
