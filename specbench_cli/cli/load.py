"""`specbench load`: a task suite's questions as requests at rising concurrency and request rate,
every method on the same trace (specbench_cli/load/, docs/load.md). Its options follow `vllm
bench serve` where they fit (`--request-rate`, `--burstiness`, `--max-concurrency`,
`--num-prompts`); the run options that apply to a load run (model, methods, tasks, cap, engines)
are `specbench run`'s own, derived from `RunConfig` as `run` derives them."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional

import typer

from specbench_cli.cli.run import config_parameters
from specbench_cli.config.declare import flat_name
from specbench_cli.config.fields import RunConfig, option_fields
from specbench_cli.errors import UsageError

# The run options a load run takes, by flat name (the others do not apply: it decodes greedily, one
# request per sequence, its own warm-up, block complexities and folder).
RUN_OPTIONS = (
    "model", "methods", "method_options", "tasks", "questions", "categories", "limit", "question_ids",
    "question_field", "reference_field", "category_field", "id_field", "max_new_tokens", "dtype", "device",
    "threads", "seed", "draft_model", "engine_bin", "engine_url", "engine_timeout", "prompt_template", "target",
    "forward", "kernels", "auto_candidates",
)
# With --resume only these may be given (what starts a process or reaches the network is never
# taken from a folder): everything else comes from the folder's manifest.
RESUME_FREE = ("engine_bin", "engine_url", "engine_timeout", "trust_remote_code", "resume")

EXTRA = {
    "concurrency": (Optional[str], typer.Option(None, "--concurrency", help="Closed-loop points: requests kept in "
                    "flight, comma-separated (default 1,2,4,8 when no --request-rate is given).")),
    "request_rate": (Optional[str], typer.Option(None, "--request-rate", help="Open-loop points: requests per "
                     "second, comma-separated (Poisson arrivals, or gamma with --burstiness).")),
    "burstiness": (float, typer.Option(1.0, "--burstiness", help="Gamma shape of the inter-arrival times of "
                   "--request-rate points: 1 Poisson, below 1 burstier, above 1 more regular.")),
    "max_concurrency": (Optional[int], typer.Option(None, "--max-concurrency", help="At most this many requests "
                        "in flight at --request-rate points (default: no bound; the server queues them).")),
    "num_prompts": (Optional[int], typer.Option(None, "--num-prompts", help="Requests per point (default: each "
                    "question once; more cycle through the questions).")),
    "time_limit": (float, typer.Option(600.0, "--time-limit", help="Seconds per point and method: nothing is "
                   "sent after it, what was sent finishes.")),
    "warmup": (int, typer.Option(1, "--warmup", help="Warm-up requests per point and method, sent before its "
               "clock starts and not recorded.")),
    "slo": (Optional[str], typer.Option(None, "--slo", help="Goodput thresholds for the reports, in ms: "
            "ttft:MS,tpot:MS (and e2el:MS).")),
    "bc": (Optional[str], typer.Option(None, "--bc", "--block-complexity", help="Block complexity; several, "
           "comma-separated, sweep it at every load point (points named -bcK); 'adaptive' for specbench's own "
           "methods that take it.")),
    "output_dir": (Optional[Path], typer.Option(None, "--output-dir", help="The load run's folder [default: "
                   "results/load-<time>]; the same folder again continues it.")),
    "resume": (Optional[Path], typer.Option(None, "--resume", help="Continue the load run in this folder with "
               "its own settings (give --engine-bin/--engine-url again).")),
    "trust_remote_code": (bool, typer.Option(False, "--trust-remote-code", help="Let a model run the Python code "
                          "it ships (as for run).")),
}


def load(ctx: typer.Context, **params: Any) -> None:
    """Send a suite's questions as requests at rising concurrency and request rate, every method
    (speculation on and off) on the same trace; records in a resumable folder (docs/load.md)."""
    from specbench_cli.load.driver import (
        LoadOptions,
        check_folder,
        execute,
        folder_settings,
        parse_bcs,
        parse_levels,
        parse_rates,
        parse_slo,
        plan_load,
        settings_from_folder,
    )

    extra = {name: params.pop(name) for name in EXTRA}
    given = {name for name in ctx.params if ctx.get_parameter_source(name).name not in ("DEFAULT", "DEFAULT_MAP")}
    if extra["resume"] is not None:
        refused = sorted(given - set(RESUME_FREE) - {"output_dir"})
        if refused:
            raise UsageError(f"--resume takes its settings from {extra['resume']}/manifest.json: drop "
                             f"--{refused[0].replace('_', '-')} (only --engine-bin, --engine-url and "
                             f"--engine-timeout may be given again)")
        if extra["output_dir"] is not None and Path(extra["output_dir"]) != Path(extra["resume"]):
            raise UsageError("--resume DIR continues DIR: drop --output-dir")
        cfg, opts, listed = settings_from_folder(extra["resume"])
        fresh = RunConfig.from_cli(params)
        for name in ("engine_bin", "engine_url", "engine_timeout"):
            cfg.set(name, fresh.get(name))
        out = Path(extra["resume"])
    else:
        cfg = RunConfig.from_cli(params)
        from specbench_cli.run.plan import default_methods

        listed = cfg.methods.names or default_methods()
        opts = LoadOptions(concurrency=parse_levels(extra["concurrency"]), request_rate=parse_rates(
            extra["request_rate"]), burstiness=extra["burstiness"], max_concurrency=extra["max_concurrency"],
            num_prompts=extra["num_prompts"], time_limit_s=extra["time_limit"], warmup=extra["warmup"],
            bcs=parse_bcs(extra["bc"]), slo=parse_slo(extra["slo"]))
        if extra["output_dir"] is not None:
            out = Path(extra["output_dir"]).expanduser()
        else:
            from specbench_cli.store.runfolder import new_run_id

            out = Path("results") / f"load-{new_run_id()}"
    cfg.methods.names = list(listed)
    plan = plan_load(cfg, opts, list(listed))
    doc = check_folder(out, folder_settings(plan.cfg, plan.opts, plan.instances))
    if extra["resume"] is not None and doc is None:
        raise UsageError(f"--resume {out}: not a load run folder (no manifest.json)")
    execute(plan, out, doc, trust_remote_code=extra["trust_remote_code"])


def _signature() -> None:
    """`load`'s parameters: the run options it takes (as `run` declares them), then EXTRA."""
    keep = {f.metadata["cli"].name for _, f in option_fields() if flat_name(f) in RUN_OPTIONS}
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    annotations: dict[str, Any] = {"ctx": typer.Context, "return": None}
    for name, annotation, default in [p for p in config_parameters() if p[0] in keep] + \
            [(n, a, d) for n, (a, d) in EXTRA.items()]:
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
        annotations[name] = annotation
    load.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    load.__annotations__ = annotations


_signature()


def bounds() -> dict:
    """The bounds of load's own number options (main.py words a refusal with them)."""
    from specbench_cli.options import Bound

    return {"--warmup": Bound(0, 10_000), "--num-prompts": Bound(1), "--max-concurrency": Bound(1, 1024)}


load.bounds = bounds  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    app.command("load")(load)
