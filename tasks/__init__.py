"""Task suites, each a module with NAME, SUMMARY and load(questions_path) -> list[Question]."""

from __future__ import annotations

import importlib

from specbench_cli.errors import unknown
from specbench_cli.tasks.base import Question, select  # noqa: F401

REGISTRY = {
    "mini": "specbench_cli.tasks.mini",
    "spec_bench": "specbench_cli.tasks.spec_bench",
    "humaneval": "specbench_cli.tasks.humaneval",
    "jsonl": "specbench_cli.tasks.jsonl",
}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str):
    if name not in REGISTRY:
        raise unknown("task", name, REGISTRY)
    return importlib.import_module(REGISTRY[name])
