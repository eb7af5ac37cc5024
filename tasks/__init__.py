"""Task suites: short name -> "module:Class" (a `specbench_cli.tasks.base.Task` subclass).

Built-ins are listed here; other packages add suites through the `specbench.tasks`
entry-point group (see `specbench_cli/registry.py`). Modules are imported on first use only.
"""

from __future__ import annotations

from specbench_cli.registry import Registry

_REGISTRY = Registry("task", "specbench.tasks", "specbench_cli.tasks.base:Task", {
    "mini": "specbench_cli.tasks.mini:Mini",
    "spec_bench": "specbench_cli.tasks.spec_bench:SpecBench",
    "humaneval": "specbench_cli.tasks.humaneval:HumanEval",
    "jsonl": "specbench_cli.tasks.jsonl:Jsonl",
})
REGISTRY = _REGISTRY.entries
DESCRIBED = {"summary": ""}

names = _REGISTRY.names
get = _REGISTRY.get
register = _REGISTRY.register


def describe(name: str) -> dict:
    return _REGISTRY.describe(name, DESCRIBED)
