"""Task suites: short name -> "module:Class" (a `specbench_cli.tasks.base.Task` subclass).

Built-ins are listed here; other packages add suites through the `specbench.tasks`
entry-point group (see `specbench_cli/registry.py`). Modules are imported on first use only.
"""

from __future__ import annotations

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
DESCRIBED = {"summary": ""}

names = _REGISTRY.names
register = _REGISTRY.register


def get(name: str, source=None):
    """The Task class for `name`. `hf:PATH_OR_ID[:CONFIG][:SPLIT]` names a dataset read through
    `datasets` (tasks/hf.py); its column mapping comes from `source`'s question_field,
    reference_field, category_field, id_field and scorer (a RunConfig or a sweep Grid).
    `speed-bench:CONFIG` is one of SPEED-Bench's splits (tasks/speed_bench.py)."""
    from specbench_cli.tasks import hf, speed_bench

    if hf.is_hf(name):
        return hf.hf_task(name, hf.fields_of(source))
    if speed_bench.is_speed_bench(name):  # speed-bench:CONFIG, one of SPEED-Bench's splits
        return speed_bench.task_for(name)
    return _REGISTRY.get(name)


def describe(name: str) -> dict:
    return _REGISTRY.describe(name, DESCRIBED)
