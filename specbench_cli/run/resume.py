"""`specbench run --resume`: what a run folder may choose, flags that contradict the run's
manifest, and `--retry-errors`.

A resumed run takes its settings from its manifest, so a flag given with `--resume` either
repeats the manifest (harmless) or contradicts it: then the run is refused (exit 2) and the
flags are named, because silently ignoring `--bc 30` would add BC-10 rows the user thinks are
BC-30 ones.

A run folder is data, never a program: it may come from elsewhere (a download, a colleague's
disk). So what starts a process, reaches the network or names a file to write (`--engine-bin`,
`--engine-url`, an engine method's `args`; each declared `from_folder=False`, config/fields.py and
options.py) is never taken from the manifest: the command line gives it again, as it gives
`--trust-remote-code` (never stored at all). A manifest that sets one the command line does not
give is refused with one line naming it and how to pass it, before anything is planned (planning
already starts programs: vLLM's interpreter is asked whether it has vLLM). And the folder's engine
logs, which a resumed run appends to, must not be links or special files.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional

from specbench_cli.config.declare import field_default, flat_name
from specbench_cli.config.fields import RunConfig, option_fields
from specbench_cli.config.instance import parse_instance
from specbench_cli.errors import UsageError, check_not_link, check_not_special
from specbench_cli.names import AR
from specbench_cli.options import taken_from_folder
from specbench_cli.store.runfolder import RunFolder

# `run` parameter -> (the option's flat name, the CLI value as the manifest stores it). Parameters not
# listed (--resume, --no-report, --trust-remote-code, --retry-errors) do not touch the config.
Normalise = Callable[[Any], Any]
OPTION = "option"            # the `run` parameter of -o METHOD.KEY=VALUE (`cfg.methods.options`)
METHOD_OPTIONS = "method_options"  # its flat name
SHOWN = 160                  # characters of a manifest value quoted in a refusal


def resume_conflicts(given: dict[str, Any], cfg: RunConfig, normalise: dict[str, tuple[str, Normalise]]) -> list[str]:
    """'--flag VALUE (manifest: VALUE)' for each given flag whose value differs from `cfg`.

    given:     parameter name -> value, only for parameters the user actually passed.
    normalise: parameter name -> (the option's flat name, function turning the CLI value into
               the stored form, e.g. '--methods pld' -> ['ar', 'pld']).
    """
    found = []
    for name, value in given.items():
        if name not in normalise:
            continue
        field, norm = normalise[name]
        wanted, stored = norm(value), cfg.get(field)
        if wanted != stored:
            flag = "--" + name.replace("_", "-")
            shown = flag if isinstance(value, bool) else f"{flag} {_show(wanted)}"  # a switch has no value
            found.append(f"{shown} (manifest: {field}={_show(stored)})" if isinstance(value, bool)
                         else f"{shown} (manifest: {_show(stored)})")
    return found


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def check_resume_flags(given: dict[str, Any], cfg: RunConfig, normalise: dict[str, tuple[str, Normalise]],
                       folder: str) -> None:
    """Everything `--resume FOLDER` checks before planning, on `cfg` (the manifest's, changed in
    place): the settings a run folder may not choose come from the command line
    (`command_line_settings`), every other flag given repeats the manifest, and the folder's
    engine logs are plain files (`check_engine_logs`). UsageError (exit 2) otherwise."""
    given = dict(given)
    from_command_line = command_line_settings(given, cfg, normalise, folder)
    conflicts = resume_conflicts(given, cfg, normalise)
    if conflicts:
        raise UsageError(f"--resume {folder}: {'; '.join(conflicts)} contradict(s) the run's manifest; "
                         f"a resumed run keeps its settings (drop the flag(s), or start a new run)")
    from_command_line()
    check_engine_logs(Path(folder))


def command_line_settings(given: dict[str, Any], cfg: RunConfig, normalise: dict[str, tuple[str, Normalise]],
                          folder: str) -> Callable[[], None]:
    """Remove from `cfg` every setting a run folder may not choose (run options and method
    options declared `from_folder=False`) and take them out of `given`; return the function that
    puts the command line's values into `cfg` (called once the other flags are compared with the
    manifest, which no longer holds them). UsageError when the manifest sets one that the command
    line does not give again: one line naming each and how to pass it."""
    named: dict[str, Any] = {}       # '--engine-bin' / '-o llama.cpp:ar.args' -> the manifest's value
    supplied: set[str] = set()       # the same names, given on the command line
    values: dict[str, Any] = {}      # the option's flat name -> the command line's value
    for section, f in option_fields():
        if taken_from_folder(f) or flat_name(f) == METHOD_OPTIONS:
            continue
        name, flag, settings = f.metadata["cli"].name, f.metadata["cli"].flags[0], getattr(cfg, section)
        if getattr(settings, f.name) != field_default(f):
            named[flag] = getattr(settings, f.name)
        setattr(settings, f.name, field_default(f))
        if name in given:
            values[flat_name(f)] = normalise[name][1](given.pop(name))
            supplied.add(flag)

    stored_options, cfg.methods.options = _split_options(cfg.methods.options)
    named.update({_option_name(method, key): value for method, opts in stored_options.items()
                  for key, value in opts.items()})
    given_options: dict[str, dict[str, Any]] = {}
    if OPTION in given:
        given_options, rest = _split_options(normalise[OPTION][1](given.pop(OPTION)))
        supplied.update(_option_name(method, key) for method, opts in given_options.items() for key in opts)
        if rest:  # the other -o values must repeat the manifest's, as before
            given[OPTION] = [f"{method}.{key}={value}" for method, opts in rest.items() for key, value in opts.items()]
    missing = [name for name in named if name not in supplied]
    if missing:
        sep = {flag: " " if flag.startswith("--") else "=" for flag in missing}  # --engine-bin X, -o M.KEY=X
        listed = " and ".join(f"{flag}{sep[flag]}{_quote(named[flag])}" for flag in missing)
        how = " ".join(f"{flag}{sep[flag]}..." for flag in missing)
        raise UsageError(f"--resume {folder}: the run folder sets {listed}, which a resumed run takes only from "
                         f"the command line (a run folder never chooses a program to start, a server to reach or "
                         f"a file to write): pass {how} on the command line to resume it")

    def apply() -> None:
        for name, value in values.items():
            cfg.set(name, value)
        for method, opts in given_options.items():
            cfg.methods.options.setdefault(method, {}).update(opts)

    return apply


def command_line_only_args(args: list[str]) -> list[str]:
    """The part of a `run` argument list that `run --resume` must be given again: each run option's
    flag and each `-o/--option METHOD.KEY=VALUE` declared `from_folder=False`, in order (a sweep
    resuming a half-done job passes its own grid's values, never the folder's)."""
    flags = {flag for _, f in option_fields() if not taken_from_folder(f) and flat_name(f) != METHOD_OPTIONS
             for flag in f.metadata["cli"].flags}
    option_flags = set(next(f for _, f in option_fields() if flat_name(f) == METHOD_OPTIONS).metadata["cli"].flags)
    kept: list[str] = []
    i = 0
    while i + 1 < len(args):
        flag, value = args[i], args[i + 1]
        if flag in flags:
            kept += [flag, value]
        elif flag in option_flags and "." in value.split("=", 1)[0]:
            method, key = value.split("=", 1)[0].rsplit(".", 1)
            if _split_options({method: {key: None}})[0]:
                kept += [flag, value]
        i += 2 if flag.startswith("-") and not value.startswith("-") or flag in flags | option_flags else 1
    return kept


def _split_options(options: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(the method options declared `from_folder=False`, the others), each METHOD -> {KEY: VALUE}."""
    only, rest = {}, {}
    for method, opts in options.items():
        cls = _options_class(method)
        local = {f.name for f in dataclasses.fields(cls) if not taken_from_folder(f)} if cls else set()
        for key, value in opts.items():
            side = only if str(key).replace("-", "_") in local else rest
            side.setdefault(method, {})[key] = value
    return only, rest


def _options_class(method: str) -> Optional[type]:
    """The `Options` dataclass of a method name (`pld`, `pld@6`, `llama.cpp:ar`); None for a name
    no registry knows (planning refuses it with its own line)."""
    try:
        inst = parse_instance(method)
        if inst.engine is not None:
            from specbench_cli.servers import registry as engine_methods

            cls = engine_methods.get(inst.name)
        else:
            from specbench_cli import methods as method_registry

            cls = method_registry.get(inst.name)
    except UsageError:
        return None
    options = getattr(cls, "Options", None)
    return options if dataclasses.is_dataclass(options) else None


def _option_name(method: str, key: str) -> str:
    """'-o METHOD.KEY' as a refusal names a method option (KEY with '_', as `parse_options` reads it)."""
    return f"-o {method}.{str(key).replace('-', '_')}"


def _quote(value: Any) -> str:
    """A manifest value as a refusal quotes it: repr (a control character shows as an escape),
    cut to SHOWN characters."""
    text = repr(_show(value))
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "...'"


def check_engine_logs(folder: Path) -> None:
    """UsageError when the run folder's engine-log folder (`servers/`), or anything in it, is a
    symbolic link or a special file: a resumed run appends each engine server's output there, and
    a folder from elsewhere may plant `servers/llama.cpp-ar.log -> /some/file` (the server's
    output would overwrite it) or a FIFO (the server would block). servers/server.py opens the
    logs without following links too; this says so before any model loads."""
    from specbench_cli.servers.engine_method import LOG_FOLDER

    logs = check_not_special(check_not_link(folder / LOG_FOLDER), "engine log folder")
    if logs.exists() and not logs.is_dir():
        raise UsageError(f"{logs} is not a folder (a run folder keeps its engine servers' logs there)")
    if logs.is_dir():
        for entry in logs.iterdir():
            check_not_special(check_not_link(entry), "engine log")


def retry_error_rows(store: RunFolder) -> int:
    """Remove error rows so the resumed run makes them again; return how many went.

    Also removed: rows of other methods whose AR row failed (they could not be compared with
    AR, `ar_match` is null) at the same temperature, so the retried AR answer is compared with a
    fresh one. Later turns after a failed turn are error rows themselves ("not run: an earlier
    turn failed")."""
    rows = store.rows()
    failed_ar = {_question(r) for r in rows if r["method"] == AR and r["status"] != "ok"}

    def drop(row: dict) -> bool:
        return row["status"] != "ok" or (row["method"] != AR and _question(row) in failed_ar)

    return store.drop_rows(drop)


def _question(row: dict) -> tuple:
    """The turn a row answers: (task, question, turn, repeat, temperature)."""
    return (row.get("task"), str(row["question_id"]), row["turn"], row.get("repeat", 0),
            float(row.get("temperature") or 0.0))
