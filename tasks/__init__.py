"""Task suites: short name -> "module:Class" (a `specbench_cli.tasks.base.Task` subclass), and task
sources: a prefix -> "module:SOURCE" (a `TaskSource`) for families of names such as
`hf:PATH_OR_ID[:CONFIG][:SPLIT]` and `speed-bench:CONFIG`.

Built-ins are listed here; other packages add suites through the `specbench.tasks` entry-point
group and sources through `specbench.task_sources` (see `specbench_cli/registry.py`). Modules
are imported on first use only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from specbench_cli.errors import UsageError, unknown
from specbench_cli.registry import Registry

_REGISTRY = Registry("task", "specbench.tasks", "specbench_cli.tasks.base:Task", {
    "mini": "specbench_cli.tasks.mini:Mini",
    "refine": "specbench_cli.tasks.refine:Refine",
    "spec_bench": "specbench_cli.tasks.spec_bench:SpecBench",
    "humaneval": "specbench_cli.tasks.humaneval:HumanEval",
    "jsonl": "specbench_cli.tasks.jsonl:Jsonl",
    "speed-bench": "specbench_cli.tasks.speed_bench:SpeedBench",
})
REGISTRY = _REGISTRY.entries
DESCRIBED = {"summary": "", "takes_questions_file": True}


@dataclass(frozen=True)
class TaskSource:
    """A family of task names `PREFIX:ARGS`, one Task class per name, made when it is used.

    usage:   how a name of the family is written, for lists and messages ("hf:PATH_OR_ID[:CONFIG][:SPLIT]")
    summary: one line for `specbench list tasks`
    task:    (the whole name, the settings it may read or None) -> the Task class; a UsageError
             for a malformed name or what can be told wrong before reading anything
    """

    usage: str
    summary: str
    task: Callable[[str, Any], type]


_SOURCES = Registry("task source", "specbench.task_sources", "specbench_cli.tasks:TaskSource", {
    "hf": "specbench_cli.tasks.hf:SOURCE",
    "speed-bench": "specbench_cli.tasks.speed_bench:SOURCE",
}, instances=True)
SOURCES = _SOURCES.entries

names = _REGISTRY.names
register = _REGISTRY.register
source_names = _SOURCES.names
register_source = _SOURCES.register


def get(name: str, source: Any = None) -> type:
    """The Task class for `name`: a registered suite, or `PREFIX:ARGS` of a registered source
    (`hf:` reads the column mapping from `source`'s question_field, reference_field,
    category_field, id_field and scorer: a RunConfig's task section or a sweep grid)."""
    prefix, colon, _ = name.partition(":")
    if colon and prefix in _SOURCES:
        return _SOURCES.get(prefix).task(name, source)
    if name not in _REGISTRY:
        raise unknown("task", name, names() + [s.usage for s in sources()])
    return _REGISTRY.get(name)


def describe(name: str) -> dict:
    return _REGISTRY.describe(name, DESCRIBED)


def sources() -> list[TaskSource]:
    """Every registered task source, in registration order (a broken plugin's is left out)."""
    found = []
    for prefix in source_names():
        try:
            found.append(_SOURCES.get(prefix))
        except UsageError:
            continue
    return found


def reading_questions_file() -> list[str]:
    """The registered suites that read `--questions` (for messages; a broken plugin's is left out)."""
    found = []
    for name in names():
        try:
            if describe(name)["takes_questions_file"]:
                found.append(name)
        except UsageError:
            continue
    return found
