"""`specbench run`. Its parameters are derived from `RunConfig` (config/fields.py): each option's `Cli`
metadata gives the flags, help, type and default; the few parameters that are not run settings
(`--heads`, `--resume`, ...) are declared below."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional

import typer

from specbench_cli.config.declare import UNSET, field_default, flat_name
from specbench_cli.config.fields import RunConfig, option_fields, resume_normalisers, section_hints
from specbench_cli.config.instance import method_order
from specbench_cli.config.syntax import split_list
from specbench_cli.console import err
from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.kinds import HEAD_METHODS

# Parameters of `run` that are not run settings: never stored in the manifest.
EXTRA = {
    "heads": (Optional[str], typer.Option(None, "--heads", help="Trained heads folder for the selected head method "
                                          f"({' or '.join(HEAD_METHODS)}): same as -o METHOD.heads=PATH.")),
    "resume": (Optional[Path], typer.Option(None, "--resume", help="Continue an interrupted run folder (its "
                                            "manifest's settings are used).")),
    "no_report": (bool, typer.Option(False, "--no-report", help="Do not print/write the summary table at the end.")),
    "trust_remote_code": (bool, typer.Option(False, "--trust-remote-code", help="Let a model (or draft model) run "
                                             "the Python code it ships (auto_map). Off by default: such a model is "
                                             "refused. Never stored in the run folder, so give it again with --resume.")),
    "retry_errors": (bool, typer.Option(False, "--retry-errors", help="With --resume: run the rows that ended in "
                                        "an error again.")),
}


def config_parameters() -> list[tuple[str, Any, Any]]:
    """(parameter name, annotation, typer.Option) of every run option, in `option_fields` order."""
    params = []
    for section, f in option_fields():
        cli = f.metadata["cli"]
        default = cli.default if cli.default is not UNSET else field_default(f)
        params.append((cli.name, cli.type or section_hints(section)[f.name],
                       typer.Option(default, *cli.flags, help=cli.help)))
    return params


def run(ctx: typer.Context, **params: Any) -> None:
    """Run methods on a task suite and write results/<run_id>/."""
    from specbench_cli.run.plan import check_config, default_methods
    from specbench_cli.run.workflow import execute
    from specbench_cli.store.runfolder import RunFolder

    extra = {name: params.pop(name) for name in EXTRA}
    if extra["retry_errors"] and extra["resume"] is None:
        raise UsageError("--retry-errors needs --resume RUN_DIR")
    if extra["resume"] is not None:
        if extra["heads"]:
            raise UsageError("--heads cannot change a resumed run: its methods' options are in the manifest "
                             "(drop --heads, or start a new run)")
        from specbench_cli.config.manifest import config_from_manifest
        from specbench_cli.run.resume import check_resume_flags

        store = RunFolder.open(extra["resume"])
        cfg = config_from_manifest(store.read_manifest(), str(store.manifest_path))
        given = {name: value for name, value in ctx.params.items()
                 if ctx.get_parameter_source(name).name not in ("DEFAULT", "DEFAULT_MAP")}
        normalise = resume_normalisers()
        # the manifest stores the planned method list: AR first, the defaults when none were named
        normalise["methods"] = ("methods", lambda v: method_order(split_list(v) or default_methods()))
        check_resume_flags(given, cfg, normalise, str(extra["resume"]))
        planned = check_config(cfg)
        err.print(f"resuming {extra['resume']} ({len(store.rows())} rows already there)")
    else:
        store = None
        cfg = RunConfig.from_cli(params)
        cfg.methods.names = cfg.methods.names or default_methods()
        if cfg.methods.preset:
            from specbench_cli.config.presets import apply_preset

            names = {f.metadata["cli"].name: flat_name(f) for _, f in option_fields()}
            apply_preset(cfg, {names[n] for n in ctx.params if n in names
                               and ctx.get_parameter_source(n).name not in ("DEFAULT", "DEFAULT_MAP")})
        explicit = {n for n in ctx.params if ctx.get_parameter_source(n).name not in ("DEFAULT", "DEFAULT_MAP")}
        from specbench_cli.config.presets import apply_tour

        tour = not cfg.methods.preset and not explicit & {"tasks", "question_ids"} and apply_tour(cfg, explicit)
        if extra["heads"]:
            from specbench_cli.methods.heads.common import apply_heads_flag

            apply_heads_flag(cfg.methods.names, cfg.methods.options, extra["heads"])
        planned = check_config(cfg)
        if tour:
            err.print(f"note: quick tour: {cfg.task.limit} mini question per category, "
                      f"{cfg.decoding.max_new_tokens} new tokens "
                      f"(the whole suite: --tasks mini)", highlight=False, soft_wrap=True)
    execute(cfg, store, report=not extra["no_report"], trust_remote_code=extra["trust_remote_code"],
            retry_errors=extra["retry_errors"], planned=planned)


def _signature() -> None:
    """Give `run` the parameters typer reads: the config's, then EXTRA."""
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    annotations: dict[str, Any] = {"ctx": typer.Context, "return": None}
    for name, annotation, default in config_parameters() + [(n, a, d) for n, (a, d) in EXTRA.items()]:
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
        annotations[name] = annotation
    run.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    run.__annotations__ = annotations


_signature()


def register(app: typer.Typer) -> None:
    app.command("run")(run)
