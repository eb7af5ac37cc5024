"""Which questions a grid selects, and whether its method names exist.

The only place the sweep imports package internals (the task and method registries): jobs need
question ids and categories to be split into shards, and a misspelt method should fail before
any job starts. Everything else talks to `specbench run` / `specbench report` as a user would.
"""

from __future__ import annotations

from typing import Callable

from specbench_cli.sweep.grid import Grid


def check_methods(grid: Grid) -> None:
    """`UsageError` (did-you-mean) for an unknown method name in any set."""
    from specbench_cli import methods as registry

    for method_set in grid.method_sets:
        for name in method_set:
            registry.get(name)


def selector(grid: Grid) -> Callable[[str], list[tuple[str, str, int]]]:
    """task -> [(question id, category, number of turns)] after the grid's categories and limit."""
    from specbench_cli import tasks as registry
    from specbench_cli.errors import UsageError
    from specbench_cli.tasks.base import select as select_questions

    def select(task: str) -> list[tuple[str, str, int]]:
        questions = select_questions(registry.get(task, grid).load(grid.questions_path), grid.categories, grid.limit)
        if not questions:
            raise UsageError(f"{grid.path}: task '{task}' has no questions left after categories/limit")
        if grid.shard not in ("category", "none"):
            bad = [q.id for q in questions if "," in q.id]
            if bad:
                raise UsageError(f"{grid.path}: question id '{bad[0]}' contains a comma; use shard = \"category\"")
        return [(q.id, q.category, len(q.turns)) for q in questions]

    return select
