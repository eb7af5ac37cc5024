"""The `specbench` command line: the app, its global options and the entry point. Commands are
thin (parse, call, print) and live one group per module beside this one."""

from __future__ import annotations

import os
import sys

import typer

from specbench_cli.console import err
from specbench_cli.errors import SpecBenchError
from specbench_cli.options import Bound

app = typer.Typer(
    help="Run speculative-decoding methods side by side on Spec-Bench-style suites.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

STATE = {"debug": False}
NUMBER = Bound(0, finite=True)  # every number option of every command (seeds excepted)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors.")) -> None:
    STATE["debug"] = debug


def _register_commands() -> None:
    """One module per command group, in the order `--help` lists them."""
    from specbench_cli.cli import cost, datastore, heads, listing, load, report, run, sweep
    from specbench_cli.cli.train import train_app

    run.register(app)
    load.register(app)
    cost.register(app)
    listing.register(app)
    report.register(app)
    sweep.register(app)
    heads.register(app)
    datastore.register(app)
    app.add_typer(train_app, name="train", help="Train drafters (subclone, scratch pretraining, distillation).")


_register_commands()


def _check_numbers(command) -> None:
    """Wrap every command so that a number option outside `NUMBER` (not finite, or negative) is one
    line and exit 2 before the command starts (`--lr inf`, `--lambda nan`, `--steps -3`); a command's
    own checks then handle the finer limits. Seeds may be any integer."""
    if isinstance(getattr(command, "commands", None), dict):  # a group (typer may vendor click: no isinstance)
        for sub in command.commands.values():
            _check_numbers(sub)
        return
    if command.callback is None or getattr(command.callback, "_numbers_checked", False):
        return
    inner, flags = command.callback, {p.name: p.opts[0] for p in command.params if p.opts}

    def checked(*args, **kwargs):
        for name, value in kwargs.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or "seed" in name:
                continue
            flag = flags.get(name, name)
            if not NUMBER.holds(value):
                raise _declared(flag, inner).refusal(value, flag)
        return inner(*args, **kwargs)

    checked._numbers_checked = True
    command.callback = checked


def _declared(flag: str, command=None) -> Bound:
    """The bound the command declares for `flag` (its callback's `bounds()`, e.g. `specbench
    cost`), else the run option's under that flag (config.flag_bounds), else `NUMBER`: a refusal
    then names the real bound (`--batch-size -1`: between 1 and 256), never a looser one. Only
    when a value is refused, so a good command line imports nothing for it."""
    from specbench_cli.config.fields import flag_bounds

    own = getattr(command, "bounds", None)
    declared = (own() if callable(own) else {}).get(flag) or flag_bounds().get(flag)
    return declared if declared is not None and declared.lo is not None and declared.lo >= 0 else NUMBER


def main() -> None:
    """Entry point: one line and exit 2 for bad input, 1 for failures; tracebacks with --debug."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        command = typer.main.get_command(app)
        _check_numbers(command)
        rc = command(standalone_mode=False, prog_name="specbench")
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
