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
    batch_size: int = typer.Option(1, "--batch-size", help="Sequences per forward: measure t(N, q), one forward over "
                                   "N sequences of q tokens each, as `run --batch-size N` decodes (docs/batch.md)."),
    context: int = typer.Option(400, "--context", help="Tokens already in the KV cache for every timed forward."),
    repeats: int = typer.Option(5, "--repeats", help="Timed rounds; each q's value is the median over rounds."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed forwards before timing."),
    refresh: bool = typer.Option(False, "--refresh", help="Measure again (the curve and, under --kernels auto, the kernel plan) even if cached."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Where to write the plot (default: results/cost/<key>.png)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the curve, its floor and the kernel "
                                            "plan (with every candidate's timings) as JSON here."),
    target: str = typer.Option("hf", "--target", help="What computes the forwards timed: hf (a transformers model, "
                               "on --forward) or another registered target (`specbench list targets`; as for run)."),
    forward: str = typer.Option("auto", "--forward", help="auto, sdpa, eager, short, lean or native (as for run)."),
    kernels: str = typer.Option("auto", "--kernels", help="The lean forward's matrix kernels: auto (timed once on "
                                "this CPU) or mkl, mkl-t, mkl-wx, onednn, onednn-t, onednn-packed, mkl-packed (as for run)."),
) -> None:
    """Measure the device's cost curve t(q): one target forward over q tokens (cached per model/device/dtype/threads; t(N, q) with --batch-size N)."""
    from specbench_cli import targets
    from specbench_cli.errors import unknown
    from specbench_cli.models.load import check_device, torch_dtype
    from specbench_cli.run.auto import cost as c

    c.validate(max_q, context, repeats, warmup, batch_size)
    if target not in targets.names():
        raise unknown("target", target, targets.names())
    from specbench_cli.targets.hf.forward.modes import check as check_forward

    check_forward(forward)
    from specbench_cli.targets.hf.forward.modes import check_kernels

    check_kernels(kernels)
    torch_dtype(dtype)
    check_device(device)
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    for flag, path in (("--plot", plot), ("--json", json_out)):
        if path is not None and (problem := output_problem(path, folder=False)):  # before measuring
            raise UsageError(f"{flag}: {problem}")
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import set_threads

    n_threads = set_threads(threads)
    lm = load_model(model, device=device, dtype=dtype, forward=forward, target=target, kernels=kernels,
                    refresh_kernels=refresh, note=lambda text: err.print(f"[dim]{text}[/dim]"))
    key = c.curve_key(model, lm.resolved, device, dtype, n_threads, context, lm.forward, lm.kernels, batch_size)
    curve = None if refresh else c.load_cached(key)
    if curve is not None and curve.max_q >= max_q:
        err.print(f"[dim]cached curve {c.cache_path(key)} (measured {curve.measured_at}; --refresh to measure again)[/dim]")
    else:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as bar:
            task = bar.add_task(f"timing q=1..{max_q}" + (f" x {batch_size} sequences" if batch_size > 1 else ""),
                                total=repeats * max_q)
            curve = c.measure_curve(lm.target, max_q, context, repeats, warmup, key=key,
                                    progress=lambda done, total: bar.update(task, completed=done), batch_size=batch_size)
    if curve.roofline is None and device.startswith("cpu") and batch_size == 1 and lm.model is not None:
        # measured with the curve, and for older cached ones; the floor is one sequence's (a batch
        # reads every sequence's cache: not modelled) and a transformers model's (its weights' sizes)
        from specbench_cli.run.auto.roofline import measure as measure_roofline

        roof = measure_roofline(lm.model, context)
        curve.roofline = roof.to_dict() if roof else None
        c.save_cached(curve)
    elif curve.measured_at and not c.cache_path(key).exists():
        c.save_cached(curve)
    from rich.table import Table

    from specbench_cli.targets.hf.forward.cpuinfo import cpu_flags, cpu_model

    cols = ["q", "ms", "t(q)/t(1)"] + (["floor ms", "t(q)/floor", "bound"] if curve.roofline else [])
    batch = f"{batch_size} sequences of q tokens, " if batch_size > 1 else ""
    t = Table(*cols, title=f"cost of one forward: {batch}{model}, {device}, {dtype}, {n_threads} threads, "
              f"context {context}, forward {lm.forward}")
    for q, ms, ratio in c.curve_rows(curve, every=4):
        if q <= max_q:
            extra = []
            if curve.roofline:
                from specbench_cli.run.auto.roofline import Roofline

                roof = Roofline.from_dict(curve.roofline)
                extra = [f"{roof.floor_ms(q):.1f}", f"{ms / roof.floor_ms(q):.2f}", roof.bound(q)]
            t.add_row(str(q), f"{ms:.1f}", f"{ratio:.2f}", *extra)
    out.print(t)
    if device.startswith("cpu"):
        flags = cpu_flags()
        out.print(f"CPU: {cpu_model()} ({', '.join(flags) or 'instruction set unknown'})", highlight=False)
    if curve.roofline:
        r = curve.roofline
        out.print(f"floor: read bandwidth {r['bandwidth_gbs']:.1f} GB/s over {r['weight_bytes'] / 1e6:.0f} MB of "
                  f"weights, matmul peak {r['peak_gflops']:.0f} GFLOP/s ({dtype}, {n_threads} threads)",
                  highlight=False)
    parts = []
    if curve.roofline:
        from specbench_cli.run.auto.roofline import Roofline

        parts.append(f"decode step t(1) = {curve.t(1) / Roofline.from_dict(curve.roofline).floor_ms(1):.2f} x the floor")
    if curve.max_q >= 10:
        parts.append(f"verify block t(10) = {curve.ratio(10):.2f} x t(1)")
    if parts:
        out.print(", ".join(parts), highlight=False)
    if lm.kernels:
        native = lm.kernels.get("native")
        if native:
            out.print(f"native forward: blocks of up to {native['max_q']} rows per sequence, built for "
                      f"{native['isa']}; longer blocks:", highlight=False)
        for shape, text in lm.kernels["plan"].items():
            out.print(f"kernels {shape}: {text}", highlight=False)
    if curve.remeasured:
        err.print(f"[dim]re-timed spikes at q = {', '.join(map(str, curve.remeasured))}[/dim]")
    if json_out is not None:
        import json

        from specbench_cli.atomic import atomic_write
        from specbench_cli.targets.hf.forward.cpuinfo import isa_label

        plan = lm.target.describe().get("kernel_plan")
        record = {**curve.to_dict(), "cpu": {"model": cpu_model(), "flags": cpu_flags(), "isa": isa_label(cpu_flags())},
                  "kernels": lm.kernels, "kernel_plan": plan}
        atomic_write(json_out, lambda tmp: tmp.write_text(json.dumps(record, indent=1), encoding="utf-8"))
        err.print(f"json: {json_out}")
    target = plot or Path("results") / "cost" / f"{c.cache_path(key).stem}.png"
    err.print(f"plot: {c.plot_curve(curve, target)}")


def register(app: typer.Typer) -> None:
    app.command("cost")(cost)


def _bounds() -> dict:
    from specbench_cli.run.auto.cost import bounds

    return bounds()


cost.bounds = _bounds  # the number options' declared bounds, for the CLI's early check (cli/main.py)
