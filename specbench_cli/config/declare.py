"""How a run option is declared: `option(...)` makes a field of a RunConfig section whose
metadata says how the command line spells it (`Cli`), how a sweep grid names it (`GridKey`), its
check, its flat name (the manifest's key), and whether `--resume` may take it from a run folder.
Plus the checks several fields share."""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Optional

from specbench_cli.errors import unknown
from specbench_cli.options import Bound, is_int

UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()  # "not given" in Cli / GridKey


@dataclass(frozen=True)
class Cli:
    """How `specbench run` spells a field."""

    flags: tuple[str, ...]
    help: str
    type: Any = None                                # the parameter's annotation (default: the field's)
    default: Any = UNSET                            # the parameter's default (default: the field's)
    to_config: Optional[Callable[[Any], Any]] = None  # parameter value -> stored value (default: as is)
    param: Optional[str] = None                     # the parameter's name (default: from the first flag)

    @property
    def name(self) -> str:
        return self.param or self.flags[0].lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class GridKey:
    """How a sweep grid (GRID.toml) names a field. `expands`: the key takes a list and the grid
    has one job per value; otherwise one value applies to every job."""

    key: str
    wants: str
    expands: bool = False
    default: Any = UNSET                            # the grid's default when it differs from the run's
    check: Optional[Callable[[Any], bool]] = None   # the whole TOML value (default: derived from the field)


def option(default: Any = MISSING, *, factory: Optional[Callable[[], Any]] = None, cli: Cli,
           check: Optional[Callable[[Any], Any]] = None, grid: Optional[GridKey] = None,
           from_folder: bool = True, flat: Optional[str] = None) -> Any:
    """A field of a RunConfig section. `check(value)` raises UsageError for a bad value (and may
    return a normalised one, e.g. '10' -> 10); it runs in `RunConfig.validate` and on grid values.
    `from_folder=False`: the field starts a process, reaches the network or names a file to
    write, so `--resume` never takes it from the run folder's manifest, only from the command
    line (run/resume.py; the manifest still records it). `flat`: the option's name in the
    manifest's `config` when it is not the field's (`engine_url` for `engines.url`)."""
    meta = {"cli": cli, "check": check, "grid": grid, "from_folder": from_folder, "flat": flat}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def flat_name(f: dataclasses.Field) -> str:
    """The option's flat name: its key in the manifest's `config` and the name `RunConfig.get`,
    `set`, `with_` and `from_flat` take."""
    return f.metadata["flat"] or f.name


def field_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def whole(bound: Bound, flag: str) -> Callable[[Any], Any]:
    """The check of a whole-number option within `bound` (None: not given); it carries the bound
    (`flag_bounds`)."""
    def check(value: Any) -> Any:
        if value is not None and (not is_int(value) or not bound.holds(value)):
            raise bound.refusal(value, flag)
        return value
    check.bound = bound  # type: ignore[attr-defined]
    return check


def one_of(choices: tuple[str, ...], what: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in choices:
            raise unknown(what, value, choices)
        return value
    return check


# ----------------------------------------------------------------------------- grid values

def str_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) and x.strip() for x in v)


def method_sets(v: Any) -> bool:
    """A flat list of names (one set) or a list of non-empty name lists (several sets)."""
    return str_list(v) or (isinstance(v, list) and bool(v) and all(str_list(x) for x in v))


def grid_options(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(opts, dict) and all(isinstance(x, (str, int, float, bool)) for x in opts.values())
        for opts in v.values())
