"""`jsonl`: any Spec-Bench-format JSONL file given with `--questions PATH`."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.tasks.base import Question, Task, read_jsonl_questions


class Jsonl(Task):
    """Categories are the file's own, reported as written (no folding, no renaming)."""

    name = "jsonl"
    summary = "your own Spec-Bench-format JSONL (question_id, category, turns) given with --questions"

    @classmethod
    def load(cls, questions_path=None) -> list[Question]:
        if not questions_path:
            raise UsageError("task 'jsonl' needs --questions PATH")
        return read_jsonl_questions(Path(questions_path), cls.name)
