"""Typed options: dataclass fields whose annotations (and declared bounds or choices) are the
checks, used by the run options (`config.py`: manifests and grids) and by every method's
`Options` (`-o METHOD.KEY=VALUE`). Nothing here needs a model or torch.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from specbench_cli.errors import UsageError, did_you_mean


@dataclass
class NoOptions:
    pass


def opt(default: Any, *, lo: Optional[float] = None, hi: Optional[float] = None,
        choices: Optional[tuple] = None) -> Any:
    """A method option with declared bounds (inclusive) or choices, checked in `parse_options`
    before any model loads. `hi` is an absolute ceiling that keeps memory and time bounded;
    budget-dependent limits are the method's `plan`."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "choices": choices})


INT64 = (-(1 << 63), (1 << 63) - 1)


def option_bounds(f: dataclasses.Field) -> tuple[Optional[float], Optional[float], Optional[tuple]]:
    """(lo, hi, choices) declared for an option field (None where not declared)."""
    return f.metadata.get("lo"), f.metadata.get("hi"), f.metadata.get("choices")


def user_options(opts) -> dict:
    """Options whose value differs from the dataclass default (what the user set)."""
    default = type(opts)()
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
            if getattr(opts, f.name) != getattr(default, f.name)}


def type_name(typ: Any) -> str:
    """'int' for int, Optional[int], int | None, or their string forms (modules with or
    without `from __future__ import annotations` annotate differently)."""
    if not isinstance(typ, str):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        typ = args[0] if len(args) == 1 else typ
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


def check_option(method: str, f: dataclasses.Field, value: Any) -> Any:
    """`value` against the field's type and declared bounds; UsageError naming the option."""
    if value is None and f.default is None:
        return value
    where, t = f"option {method}.{f.name}", type_name(f.type)
    if t == "bool":
        if not isinstance(value, bool):
            raise UsageError(f"{where} expects true or false, got '{value}'")
    elif t == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"{where} expects a whole number, got '{value}'")
        if not INT64[0] <= value <= INT64[1]:  # what torch and numpy take (seeds have no other bound)
            raise UsageError(f"{where} must be a 64-bit integer, between {INT64[0]} and {INT64[1]} (got {value})")
    elif t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(f"{where} expects a finite number, got '{value}'")
        value = float(value)
    elif t == "str" and not isinstance(value, str):
        raise UsageError(f"{where} expects text, got '{value}'")
    elif t == "str" and not value.strip():
        raise UsageError(f"{where} needs a value (got an empty one)")
    lo, hi, choices = option_bounds(f)
    if choices is not None and value not in choices:
        raise UsageError(f"{where} must be one of {', '.join(map(str, choices))} (got '{value}')")
    if lo is not None and value < lo or hi is not None and value > hi:
        span = f"between {lo} and {hi}" if lo is not None and hi is not None else (
            f"at least {lo}" if lo is not None else f"at most {hi}")
        raise UsageError(f"{where} must be {span} (got {value})")
    return value


