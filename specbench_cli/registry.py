"""One lazy registry mechanism for everything a name picks: short name -> "module:attr".

Every kind of pluggable thing is one `Registry`, each with the same API (`names`, `get`,
`register`, `describe`) and its own entry-point group:

    methods          specbench.methods         methods/__init__.py          a `Method` subclass
    head kinds       specbench.head_kinds      methods/heads/kinds/         a `HeadKind` (its `KIND`)
    tasks            specbench.tasks           tasks/__init__.py            a `Task` subclass
    task sources     specbench.task_sources    tasks/__init__.py            a `TaskSource` (`hf:`, `speed-bench:`)
    report formats   specbench.report_formats  report/formats.py            a `Format`
    targets          specbench.targets         specbench_cli/targets/__init__.py     a `Target` subclass
    engine methods   specbench.engine_methods  servers/registry.py           an `EngineMethod` (`ENGINE:METHOD`)

Built-in entries are listed in those modules, and nowhere else: messages, help texts and the
docs read the names from the registries. Packages outside this repository add their own
through Python entry points, e.g. in their pyproject.toml:

    [project.entry-points."specbench.methods"]
    my-method = "my_package.my_module:MyMethod"

Nothing is imported until a name is used (`get`, `describe`). `describe` imports the entry and
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
    """Names -> "module:attr" references of one kind (`method`, `task`, ...), each checked
    against a base class: a subclass of it, or with `instances=True` an instance of it (a
    declaration object such as a head kind's `KIND` or a report `Format`)."""

    def __init__(self, kind: str, group: str, base: str, builtins: dict[str, str], *, instances: bool = False) -> None:
        self.kind, self.group, self.base, self.instances = kind, group, base, instances
        self.builtins: tuple[str, ...] = tuple(builtins)  # the names listed in this repository, in order
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

    def register(self, name: str, ref: str) -> None:
        """Add an entry at run time (tests, notebooks): `ref` is "module:attr"."""
        self.entries[name] = ref

    # -- lookup -----------------------------------------------------------------------------
    def ref(self, name: str) -> str:
        """The "module:attr" registered as `name`; UsageError naming the known ones otherwise. A
        built-in name needs no look at the entry points (a plugin cannot take it over)."""
        if name not in self.entries and name not in self:
            raise unknown(self.kind, name, self.entries)
        return self.entries[name]

    def get(self, name: str) -> Any:
        """What is registered as `name`; UsageError for unknown names and for entries that are
        not a subclass (an instance) of the base class (a broken plugin)."""
        ref = self.ref(name)
        obj = load_ref(ref, f"{self.kind} '{name}'")
        base = load_ref(self.base, "base class")
        fits = isinstance(obj, base) if self.instances else isinstance(obj, type) and issubclass(obj, base)
        if not fits:
            what = "an instance" if self.instances else "a subclass"
            raise UsageError(f"{self.kind} '{name}' ({ref}) is not {what} of {self.base.replace(':', '.')}")
        return obj

    def describe(self, name: str, attrs: dict[str, Any]) -> dict[str, Any]:
        """Attributes `attrs` (name -> default) of what is registered as `name`."""
        obj = self.get(name)
        return {k: getattr(obj, k, d) for k, d in attrs.items()}


def load_ref(ref: str, what: str = "") -> Any:
    """The object a "module:attr" reference names (`attr` may be dotted); UsageError (with the
    cause) when it cannot be imported. The one loader of such references."""
    module, _, attr = ref.partition(":")
    what = what or ref
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"cannot import {what} from {module}: {exc}") from None
    for part in filter(None, attr.split(".")):
        if not hasattr(obj, part):
            raise UsageError(f"{what}: {module} has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj
