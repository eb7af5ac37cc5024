"""The sweep grid's schema (GRID.toml keys, their checks and defaults), derived from the
`GridKey` metadata of the run options (`option_fields`); sweep/grid.py reads grid files with it."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Optional

from specbench_cli.config.declare import UNSET, GridKey, field_default, flat_name, str_list
from specbench_cli.config.fields import option_fields, section_hints
from specbench_cli.errors import UsageError
from specbench_cli.options import fits, strip_optional


def grid_schema() -> dict[str, tuple[Callable[[Any], bool], str, Any]]:
    """Sweep grid key -> (check of the TOML value, what it wants, default), from the fields."""
    schema = {}
    for section, f in option_fields():
        g: Optional[GridKey] = f.metadata["grid"]
        if g is None:
            continue
        default = g.default if g.default is not UNSET else field_default(f)
        if g.expands and default is not None and not isinstance(default, list):
            default = [default]
        if flat_name(f) == "methods":
            default = None  # a grid must name its methods
        schema[g.key] = (g.check or _grid_check(section_hints(section)[f.name], f, g), g.wants, default)
    return schema


def _grid_check(hint: Any, f: dataclasses.Field, g: GridKey) -> Callable[[Any], bool]:
    """A TOML value fits the field's type `hint` (each element, for an expanding key) and passes its check."""
    check = f.metadata["check"]

    def one(v: Any) -> bool:
        if not fits(v, strip_optional(hint)) or (isinstance(v, str) and not v.strip()):
            return False
        if check is not None:
            try:
                check(v)
            except UsageError:
                return False
        return True

    if g.expands:
        return lambda v: isinstance(v, list) and bool(v) and all(one(x) for x in v)
    if typing.get_origin(strip_optional(hint)) is list:
        return str_list
    return one
