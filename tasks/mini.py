"""`mini`: a small suite written for specbench (original text): the six Spec-Bench categories,
three prompts each, MT-bench-style prompts with two turns. The default task: it ships with
the package and needs no download."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.tasks.base import SPEC_BENCH_NAMES, Question, Task, read_jsonl_questions


class Mini(Task):
    name = "mini"
    summary = "built-in: 18 original prompts, 3 per Spec-Bench category (default)"
    categories = SPEC_BENCH_NAMES
    takes_questions_file = False  # built in

    @classmethod
    def load(cls, questions_path=None) -> list[Question]:
        return read_jsonl_questions(Path(__file__).parent / "data" / "mini.jsonl", cls.name)
