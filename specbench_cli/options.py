"""Typed options: dataclass fields whose annotations (and declared bounds or choices) are the
checks. One module for both kinds of options:

- the run options (`config/fields.py`): a manifest's or a grid's JSON/TOML value is checked against the
  annotation of the option's field (in a `RunConfig` section) with `fits`, and named with `hint_name`;
- every method's `Options` (`-o METHOD.KEY=VALUE`): `parse_options` turns the typed text into the
  field's type and `check_option` checks it with the same `fits`, then the declared bounds.

A number's bounds are a `Bound`, declared once and checked (and worded) by it wherever they
apply: method options (`opt(lo=, hi=)`), run options (config/) and every number option of
every command (cli/main.py).

Nothing here needs a model or torch.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from specbench_cli.errors import UsageError, did_you_mean


@dataclass
class NoOptions:
    pass


@dataclass(frozen=True)
class Bound:
    """Inclusive bounds of a number (None: unbounded on that side); `finite`: NaN and the
    infinities are refused too (a NaN fails any declared bound anyway: it compares false)."""

    lo: Optional[float] = None
    hi: Optional[float] = None
    finite: bool = False

    def holds(self, value: float) -> bool:
        if self.finite and not math.isfinite(value):
            return False
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def span(self) -> str:
        """What a value must be: 'between 1 and 64', 'at least 1', 'a finite number >= 0', ..."""
        number = "a finite number " if self.finite else ""
        if self.lo is not None and self.hi is not None:
            return f"{number}between {self.lo} and {self.hi}"
        if self.lo is not None:
            return f"{number}>= {self.lo}" if self.finite else f"at least {self.lo}"
        if self.hi is not None:
            return f"{number}<= {self.hi}" if self.finite else f"at most {self.hi}"
        return number.strip() or "a number"

    def refusal(self, value: Any, where: str) -> UsageError:
        return UsageError(f"{where} must be {self.span()} (got {value})")

    def check(self, value: float, where: str) -> float:
        """`value`, or a UsageError naming `where` and the bounds."""
        if not self.holds(value):
            raise self.refusal(value, where)
        return value


def opt(default: Any, *, lo: Optional[float] = None, hi: Optional[float] = None,
        choices: Optional[tuple] = None, from_folder: bool = True) -> Any:
    """A method option with declared bounds (inclusive, a `Bound`) or choices, checked in
    `parse_options` before any model loads. `hi` is an absolute ceiling that keeps memory and
    time bounded; budget-dependent limits are the method's `plan`.

    `from_folder=False`: the option can start a process, reach the network or name a file to
    write (a server's extra arguments), so a resumed run never takes it from its run folder's
    manifest, only from the command line (run/resume.py; a folder from elsewhere is data)."""
    return field(default=default, metadata={"bound": Bound(lo, hi), "choices": choices, "from_folder": from_folder})


def taken_from_folder(f: dataclasses.Field) -> bool:
    """Whether a resumed run may take this option (a method option, or a run option: a field of a
    `RunConfig` section) from its run folder; False for those declared `from_folder=False` (`opt`,
    config.option)."""
    return f.metadata.get("from_folder", True)


INT64 = Bound(-(1 << 63), (1 << 63) - 1)  # what torch and numpy take (seeds have no other bound)


# ----------------------------------------------------------------------------- types

def is_int(v: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def strip_optional(hint: Any) -> Any:
    """`X` for Optional[X] / X | None, the hint itself otherwise."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return hint


def fits(value: Any, hint: Any) -> bool:
    """Does a JSON value fit a (simple) type annotation? bool is not an int here."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(fits(k, args[0]) and fits(v, args[1]) for k, v in value.items())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return is_int(value)
    return isinstance(value, hint)


def hint_name(hint: Any) -> str:
    """How a message names a type annotation ('int', 'list[str]', ...)."""
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


# ----------------------------------------------------------------------------- method options


def option_bounds(f: dataclasses.Field) -> tuple[Optional[float], Optional[float], Optional[tuple]]:
    """(lo, hi, choices) declared for an option field (None where not declared)."""
    bound = f.metadata.get("bound", Bound())
    return bound.lo, bound.hi, f.metadata.get("choices")


def user_options(opts) -> dict:
    """Options whose value differs from the dataclass default (what the user set)."""
    default = type(opts)()
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
            if getattr(opts, f.name) != getattr(default, f.name)}


def type_name(typ: Any) -> str:
    """'int' for int, Optional[int], int | None, or their string forms (modules with or
    without `from __future__ import annotations` annotate differently)."""
    if not isinstance(typ, str):
        typ = strip_optional(typ)
        return getattr(typ, "__name__", str(typ))
    return typ.replace("Optional[", "").replace("]", "").replace(" | None", "").replace("None | ", "")


def _coerce(value: Any, typ: Any, method: str, key: str) -> Any:
    if not isinstance(value, str):
        return value
    t = type_name(typ)
    try:
        if t == "int":
            return int(value)
        if t == "float":
            return float(value)
        if t == "bool":
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
    except ValueError:
        raise UsageError(f"option {method}.{key} expects {t}, got '{value}'") from None
    return value


def parse_options(method: str, options_cls: type, given: dict[str, Any]):
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    kwargs = {}
    for key, value in given.items():
        k = key.replace("-", "_")
        if k not in fields:
            known = ", ".join(fields) or "none"
            raise UsageError(f"method '{method}' has no option '{key}'.{did_you_mean(k, fields)} Options: {known}")
        kwargs[k] = check_option(method, fields[k], _coerce(value, fields[k].type, method, key))
    return options_cls(**kwargs)


_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}
_EXPECTS = {"bool": "expects true or false", "int": "expects a whole number", "float": "expects a finite number",
            "str": "expects text"}


def check_option(method: str, f: dataclasses.Field, value: Any) -> Any:
    """`value` against the field's type and declared bounds; UsageError naming the option."""
    if value is None and f.default is None:
        return value
    where, t = f"option {method}.{f.name}", type_name(f.type)
    typ = _SCALARS.get(t)
    if t == "int" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if typ is not None and not fits(value, typ):
        raise UsageError(f"{where} {_EXPECTS[t]}, got '{value}'")
    if t == "int" and not INT64.holds(value):
        raise UsageError(f"{where} must be a 64-bit integer, {INT64.span()} (got {value})")
    if t == "float":
        if not math.isfinite(value):
            raise UsageError(f"{where} {_EXPECTS[t]}, got '{value}'")
        value = float(value)
    if t == "str" and not value.strip():
        raise UsageError(f"{where} needs a value (got an empty one)")
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        raise UsageError(f"{where} must be one of {', '.join(map(str, choices))} (got '{value}')")
    bound = f.metadata.get("bound")
    if bound is not None and (bound.lo is not None or bound.hi is not None):
        bound.check(value, where)
    return value


