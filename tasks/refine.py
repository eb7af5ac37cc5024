"""`refine`: a repetitive multi-turn suite written for specbench (original text). Three
questions per Spec-Bench category; each has a second turn asking the model to revise, shorten,
repeat or continue its own first answer, so much of turn 2 repeats turn 1: the workload where
drafters that retrieve from earlier text (suffix, samd, pld) should gain most. Reports show #MAT
and the speedup per turn (`specbench report` writes them under the main table)."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.tasks.base import SPEC_BENCH_NAMES, Question, Task, read_jsonl_questions


class Refine(Task):
    name = "refine"
    summary = "built-in: 18 original two-turn prompts, 3 per Spec-Bench category; turn 2 revises turn 1's answer"
    categories = SPEC_BENCH_NAMES
    takes_questions_file = False  # built in

    @classmethod
    def load(cls, questions_path=None) -> list[Question]:
        return read_jsonl_questions(Path(__file__).parent / "data" / "refine.jsonl", cls.name)
