"""`specbench cost`: the device's cost curve t(q), one target forward over q tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from specbench_cli.atomic import output_problem
from specbench_cli.console import err, out
from specbench_cli.errors import UsageError
from specbench_cli.models.load import DEFAULT_MODEL


def cost(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Alias, Hugging Face id, local folder or .gguf file."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (cuda:N)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads (default: min(cores, 2))."),
    max_q: int = typer.Option(64, "--max-q", help="Measure q = 1..MAX_Q tokens per forward."),
    context: int = typer.Option(400, "--context", help="Tokens already in the KV cache for every timed forward."),
    repeats: int = typer.Option(5, "--repeats", help="Timed rounds; each q's value is the median over rounds."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed forwards before timing."),
    refresh: bool = typer.Option(False, "--refresh", help="Measure again even if a cached curve exists."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Where to write the plot (default: results/cost/<key>.png)."),
    forward: str = typer.Option("auto", "--forward", help="auto, sdpa, eager, short or lean (as for run)."),
) -> None:
    """Measure the device's cost curve t(q): one target forward over q tokens (cached per model/device/dtype/threads)."""
    from specbench_cli.models.load import check_device, torch_dtype
    from specbench_cli.run.auto import cost as c

    c.validate(max_q, context, repeats, warmup)
    from specbench_cli.engine.forward.modes import check as check_forward

    check_forward(forward)
    torch_dtype(dtype)
    check_device(device)
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    if plot is not None and (problem := output_problem(plot, folder=False)):  # before measuring
        raise UsageError(f"--plot: {problem}")
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import set_threads

    n_threads = set_threads(threads)
    lm = load_model(model, device=device, dtype=dtype, forward=forward)
    key = c.curve_key(model, lm.resolved, device, dtype, n_threads, context, lm.forward)
    curve = None if refresh else c.load_cached(key)
    if curve is not None and curve.max_q >= max_q:
        err.print(f"[dim]cached curve {c.cache_path(key)} (measured {curve.measured_at}; --refresh to measure again)[/dim]")
    else:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as bar:
            task = bar.add_task(f"timing q=1..{max_q}", total=repeats * max_q)
            curve = c.measure_curve(lm.model, max_q, context, repeats, warmup, key=key,
                                    progress=lambda done, total: bar.update(task, completed=done))
        c.save_cached(curve)
    from rich.table import Table

    t = Table("q", "ms", "t(q)/t(1)", title=f"cost of one forward: {model}, {device}, {dtype}, {n_threads} threads, "
              f"context {context}, forward {lm.forward}")
    for q, ms, ratio in c.curve_rows(curve, every=4):
        if q <= max_q:
            t.add_row(str(q), f"{ms:.1f}", f"{ratio:.2f}")
    out.print(t)
    target = plot or Path("results") / "cost" / f"{c.cache_path(key).stem}.png"
    err.print(f"plot: {c.plot_curve(curve, target)}")


def register(app: typer.Typer) -> None:
    app.command("cost")(cost)
