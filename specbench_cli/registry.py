"""One lazy registry for methods and tasks: short name -> "module:Class".

Built-in entries are listed in `specbench_cli/methods/__init__.py` and `.../tasks/__init__.py`.
Packages outside this repository add their own through Python entry points, e.g. in their
pyproject.toml:

    [project.entry-points."specbench.methods"]
    my-method = "my_package.my_module:MyMethod"

Nothing is imported until a name is used (`get`, `describe`). `describe` imports the class and
reads its declared attributes (`summary`, `lossless`, ...): importing every built-in method
takes well under a second and imports no torch (method modules reach torch through
`specbench_cli.lazy`), so `specbench list methods` stays fast. A built-in name cannot be taken
over by a plugin (the built-in wins).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Iterator

from specbench_cli.errors import UsageError, unknown


class Registry:
    """Names -> "module:Class" targets of one kind (`method`, `task`), checked against a base class."""

    def __init__(self, kind: str, group: str, base: str, builtins: dict[str, str]) -> None:
        self.kind, self.group, self.base = kind, group, base
        self.entries: dict[str, str] = dict(builtins)
        self.plugins: dict[str, str] = {}  # names that came from entry points -> distribution
        self._discovered = False

    # -- discovery --------------------------------------------------------------------------
    def discover(self) -> None:
        """Merge the entry points of group `self.group` (once)."""
        if self._discovered:
            return
        self._discovered = True
        for ep in entry_points(group=self.group):
            if ep.name not in self.entries:
                self.entries[ep.name] = ep.value
                self.plugins[ep.name] = getattr(ep.dist, "name", None) or "?"

    def names(self) -> list[str]:
        self.discover()
        return list(self.entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self.entries

    def register(self, name: str, target: str) -> None:
        """Add an entry at run time (tests, notebooks): `target` is "module:Class"."""
        self.entries[name] = target

    # -- lookup -----------------------------------------------------------------------------
    def target(self, name: str) -> str:
        if name not in self:
            raise unknown(self.kind, name, self.entries)
        return self.entries[name]

    def get(self, name: str) -> type:
        """The class registered as `name`; UsageError for unknown names and for entries that
        do not resolve to a subclass of the base class (a broken plugin)."""
        target = self.target(name)
        obj = load_target(target, f"{self.kind} '{name}'")
        base = load_target(self.base, "base class")
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise UsageError(f"{self.kind} '{name}' ({target}) is not a subclass of {self.base.replace(':', '.')}")
        return obj

    def describe(self, name: str, attrs: dict[str, Any]) -> dict[str, Any]:
        """Class attributes `attrs` (name -> default) of the class registered as `name`."""
        obj = self.get(name)
        return {k: getattr(obj, k, d) for k, d in attrs.items()}


def load_target(target: str, what: str) -> Any:
    """Import "module:attr"; UsageError (with the cause) when it cannot be imported."""
    module, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"cannot import {what} from {module}: {exc}") from None
    for part in filter(None, attr.split(".")):
        if not hasattr(obj, part):
            raise UsageError(f"{what}: {module} has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj
