"""The `specbench` command line. Commands are thin: parse, call, print."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from specbench_cli.console import err, out
from specbench_cli.run.auto.bcauto import CALIBRATION_TOKENS as CAL_TOKENS
from specbench_cli.errors import SpecBenchError, UsageError

app = typer.Typer(
    help="Run speculative-decoding methods side by side on Spec-Bench-style suites.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

STATE = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors.")) -> None:
    STATE["debug"] = debug


def _split(values: Optional[List[str]]) -> Optional[list[str]]:
    if not values:
        return None
    items = [v.strip() for raw in values for v in raw.split(",") if v.strip()]
    return items or None


def _parse_method_options(values: Optional[List[str]]) -> dict[str, dict[str, str]]:
    opts: dict[str, dict[str, str]] = {}
    for raw in values or []:
        if "=" not in raw or "." not in raw.split("=", 1)[0]:
            raise UsageError(f"--option expects METHOD.KEY=VALUE, got '{raw}'")
        lhs, value = raw.split("=", 1)
        method, key = lhs.split(".", 1)
        opts.setdefault(method.strip(), {})[key.strip()] = value.strip()
    return opts


@app.command()
# Long (~65 lines) only because typer declares every option as a parameter; the body just builds a RunConfig.
def run(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Alias, Hugging Face id, local folder or .gguf file."),
    methods: Optional[List[str]] = typer.Option(None, "--methods", help="Comma-separated method names (default: all that need no training). AR always runs as the baseline."),
    tasks: Optional[List[str]] = typer.Option(None, "--tasks", "-t", help="Task suites (default: mini)."),
    questions: Optional[str] = typer.Option(None, "--questions", help="Questions JSONL (Spec-Bench format) for spec_bench or jsonl."),
    categories: Optional[List[str]] = typer.Option(None, "--categories", help="Only these categories (comma-separated)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many questions per category."),
    question_ids: Optional[List[str]] = typer.Option(None, "--question-ids", help="Only these question ids (comma-separated)."),
    block_complexity: str = typer.Option("10", "--block-complexity", "--bc", help="Max tokens the target processes per forward, root included; 'auto': per method, the budget with the best predicted throughput on this device (docs/block-complexity-auto.md). A method listed as NAME@BC (pld@auto, pld@6) has its own."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Generation cap per turn."),
    dtype: str = typer.Option("float32", "--dtype", help="float32 (exact lossless check), bfloat16 or float16."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (cuda:N)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads (default: min(cores, 2))."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass (with --temperature > 0)."),
    seed: int = typer.Option(0, "--seed"),
    repeats: int = typer.Option(1, "--repeats", help="Run everything N times (mean ± std of speedups in reports)."),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", help="Draft model for sps (same kinds of reference as --model)."),
    option: Optional[List[str]] = typer.Option(None, "--option", "-o", help="Method option METHOD.KEY=VALUE (repeatable)."),
    heads: Optional[str] = typer.Option(None, "--heads", help="Trained heads folder for the selected head method (medusa or eagle): same as -o METHOD.heads=PATH."),
    output_dir: Path = typer.Option(Path("results"), "--output-dir", help="Where run folders are created."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue an interrupted run folder (its manifest's settings are used)."),
    no_warmup: bool = typer.Option(False, "--no-warmup", help="Skip the untimed warm-up generation."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not print/write the summary table at the end."),
    auto_candidates: Optional[str] = typer.Option(None, "--auto-candidates", help="Budgets 'auto' tries, comma-separated (default 1,2,3,4,6,8,12,16,24)."),
    auto_questions: int = typer.Option(6, "--auto-questions", help="Calibration questions for 'auto' (from the mini suite, one per category, never reported)."),
    auto_tokens: int = typer.Option(CAL_TOKENS, "--auto-tokens", help="New tokens per calibration question for 'auto' (capped by --max-new-tokens)."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Let a model (or draft model) run the Python code it ships (auto_map). Off by default: such a model is refused. Never stored in the run folder, so give it again with --resume."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="With --resume: run the rows that ended in an error again."),
    forward: str = typer.Option("auto", "--forward", help="How the target computes a forward: auto (lean for a Llama-architecture target on CPU, else sdpa), sdpa, eager, short (attention for few-token blocks) or lean (fused Llama decoder + short); docs/performance.md. One for the whole run, AR included; the manifest records the resolved one."),
) -> None:
    """Run methods on a task suite and write results/<run_id>/."""
    from specbench_cli.run.runner import RunConfig, config_from_manifest, default_methods
    from specbench_cli.store.runfolder import RunFolder
    from specbench_cli.run.workflow import execute

    if retry_errors and resume is None:
        raise UsageError("--retry-errors needs --resume RUN_DIR")
    if resume is not None:
        from specbench_cli.run.resume import check_resume_flags

        store = RunFolder.open(resume)
        cfg = config_from_manifest(store.read_manifest(), str(store.manifest_path))
        given = {name: value for name, value in ctx.params.items()
                 if ctx.get_parameter_source(name).name not in ("DEFAULT", "DEFAULT_MAP")}
        check_resume_flags(given, cfg, _RESUME_FIELDS, str(resume))
        cfg.validate()
        err.print(f"resuming {resume} ({len(store.rows())} rows already there)")
    else:
        store = None
        method_list, method_options = _split(methods) or default_methods(), _parse_method_options(option)
        if heads:
            from specbench_cli.methods.heads.common import apply_heads_flag

            apply_heads_flag(method_list, method_options, heads)
        cfg = RunConfig(
            model=model, methods=method_list, method_options=method_options,
            tasks=_split(tasks) or ["mini"], questions=questions, categories=_split(categories), limit=limit,
            question_ids=_split(question_ids), block_complexity=block_complexity, max_new_tokens=max_new_tokens,
            dtype=dtype, device=device, threads=threads, temperature=temperature, top_p=top_p, seed=seed,
            repeats=repeats, warmup=not no_warmup, draft_model=draft_model, output_dir=str(output_dir),
            auto_candidates=auto_candidates.split(",") if auto_candidates else None, auto_questions=auto_questions,
            auto_tokens=auto_tokens, forward=forward)
        cfg.validate()
    execute(cfg, store, report=not no_report, trust_remote_code=trust_remote_code, retry_errors=retry_errors)


def _methods_stored(value):
    from specbench_cli.run.resume import methods_as_stored
    from specbench_cli.run.runner import default_methods

    return methods_as_stored(_split(value), default_methods())


def _same(value):
    return value


def _bc(value):
    from specbench_cli.run.auto.bcauto import parse_bc

    return parse_bc(value)  # "10" -> 10, "AUTO" -> "auto": as the manifest stores it


def _candidates(value):
    from specbench_cli.run.auto.bcauto import parse_candidates

    return parse_candidates(value)


# `run` flag -> (RunConfig field, CLI value as the manifest stores it): what --resume compares
_RESUME_FIELDS = {
    "model": ("model", _same), "methods": ("methods", _methods_stored), "tasks": ("tasks", _split),
    "questions": ("questions", _same), "categories": ("categories", _split), "limit": ("limit", _same),
    "question_ids": ("question_ids", _split), "block_complexity": ("block_complexity", _bc),
    "max_new_tokens": ("max_new_tokens", _same), "dtype": ("dtype", _same), "device": ("device", _same),
    "threads": ("threads", _same), "temperature": ("temperature", _same), "top_p": ("top_p", _same),
    "seed": ("seed", _same), "repeats": ("repeats", _same), "draft_model": ("draft_model", _same),
    "option": ("method_options", _parse_method_options), "output_dir": ("output_dir", str),
    "no_warmup": ("warmup", lambda v: not v),
    "auto_candidates": ("auto_candidates", _candidates), "auto_questions": ("auto_questions", _same),
    "auto_tokens": ("auto_tokens", _same),
    "forward": ("forward", _same),
}


@app.command()
def cost(
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Alias, Hugging Face id, local folder or .gguf file."),
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
    from specbench_cli.run.auto import cost as c
    from specbench_cli.models.load import check_device, torch_dtype

    c.validate(max_q, context, repeats, warmup)
    from specbench_cli.engine.forward.modes import check as check_forward

    check_forward(forward)
    torch_dtype(dtype)
    check_device(device)
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
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


@app.command("list")
def list_(what: str = typer.Argument(..., help="methods, tasks or models")) -> None:
    """List registered methods, tasks or model aliases."""
    from rich.table import Table

    if what == "methods":
        from specbench_cli import methods as reg

        t = Table("name", "lossless", "needs training", "summary")
        for n in reg.names():  # read from source: listing imports no method (and no torch)
            d = reg.describe(n)
            t.add_row(n, "yes" if d["lossless"] else "no", "yes" if d["needs_training"] else "no", d["summary"])
    elif what == "tasks":
        from specbench_cli import tasks as reg

        t = Table("name", "summary")
        for n in reg.names():
            t.add_row(n, reg.describe(n)["summary"])
    elif what == "models":
        from specbench_cli.models.load import ALIASES, DEFAULT_MODEL

        t = Table("alias", "default", "what")
        for alias, (_, _, desc) in ALIASES.items():
            t.add_row(alias, "yes" if alias == DEFAULT_MODEL else "", desc)
        out.print(t)
        out.print("Any Hugging Face model id, local model folder or .gguf file also works as --model.")
        return
    else:
        from specbench_cli.errors import unknown

        raise unknown("list target", what, ["methods", "tasks", "models"])
    out.print(t)


def _register_subcommands() -> None:
    """Commands that live in their own modules."""
    from specbench_cli.cli.report import register
    from specbench_cli.cli.train import train_app

    register(app)
    from specbench_cli.cli.sweep import register as register_sweep; register_sweep(app)  # noqa: E702
    app.add_typer(train_app, name="train", help="Train drafters (subclone, scratch pretraining, distillation).")


_register_subcommands()


def main() -> None:
    """Entry point: one line and exit 2 for bad input, 1 for failures; tracebacks with --debug."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except SpecBenchError as e:
        if STATE["debug"]:
            raise
        from rich.markup import escape  # messages quote user text: "specbench-cli[ray]" is not markup

        # one line, even in an 80-column log
        err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/yellow]")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors and anything unexpected
        if _is_click(e, "NoArgsIsHelpError"):
            sys.exit(0)
        if _is_click(e, "ClickException"):
            e.show()
            sys.exit(e.exit_code)
        if _is_click(e, "Abort"):
            err.print("[yellow]aborted[/yellow]")
            sys.exit(130)
        if STATE["debug"]:
            raise
        err.print(f"[red]error:[/red] {type(e).__name__}: {e} (run with --debug for the traceback)", highlight=False)
        sys.exit(1)


def _is_click(exc: BaseException, name: str) -> bool:
    """Typer vendors click in some versions: match exception classes by name along the MRO."""
    return any(c.__name__ == name for c in type(exc).__mro__)

if __name__ == "__main__":
    main()
