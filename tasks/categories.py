"""Category names, order and folding, as the registered tasks declare them (`Task.categories`,
`Task.fold`). Metrics and reports ask here and know no task by name."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

OVERALL = "overall"


@lru_cache(maxsize=None)
def _tasks() -> tuple[type, ...]:
    from specbench_cli import tasks
    from specbench_cli.errors import UsageError

    found = []
    for name in tasks.names():
        try:
            found.append(tasks.get(name))
        except UsageError:  # a broken plugin must not break every report
            continue
    return tuple(found)


def known_names() -> dict[str, str]:
    """Reported category -> display name over every registered task, in registry order."""
    names: dict[str, str] = {}
    for task in _tasks():
        for key, display in task.categories.items():
            names.setdefault(key, display)
    return names


def display_category(category: str) -> str:
    """Display name of a category (`math_reasoning` -> `Math`); unknown names are kept."""
    if category == OVERALL:
        return "Overall"
    return known_names().get(category, category)


def order_categories(categories: Iterable[str]) -> list[str]:
    """The order of the first task that declares every category present (SPEED-Bench's own order
    for SPEED-Bench's categories, though Spec-Bench also has `qa`); otherwise task-declared order
    first, then other categories alphabetically; `overall` last."""
    present = set(categories)
    suite = next((t.categories for t in _tasks() if present - {OVERALL} and present - {OVERALL} <= set(t.categories)),
                 None)
    known = suite if suite is not None else known_names()
    ordered = [c for c in known if c in present]
    ordered += sorted(c for c in present if c not in known and c != OVERALL)
    return ordered + ([OVERALL] if OVERALL in present else [])


def canonical_category(task: str, category: str) -> str:
    """The category a row of `task` is reported under (the task's `fold`; rows written before
    the task folded at load time)."""
    for t in _tasks():
        if t.name == task:
            return t.reported(category)
    return category
