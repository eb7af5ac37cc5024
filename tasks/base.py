"""Tasks, questions, and the generic JSONL reader every suite uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import read_objects

# Spec-Bench's six categories in its table order, with the names its papers print.
SPEC_BENCH_NAMES = {"mt_bench": "MT-bench", "translation": "Translation", "summarization": "Summarization",
                    "qa": "QA", "math_reasoning": "Math", "rag": "RAG"}
SPEC_BENCH_CATEGORIES = tuple(SPEC_BENCH_NAMES)


@dataclass
class Question:
    """One prompt of a suite. `turns` are user messages; turn k sees the answers to turns < k."""

    task: str
    id: str
    category: str
    turns: list[str]
    subcategory: Optional[str] = None
    difficulty: Optional[str] = None  # where the suite grades its questions (SPEED-Bench); reports group by it too
    reference: Optional[list] = field(default=None, repr=False)  # one entry per turn
    scorer: Optional[str] = None  # how answers are scored against `reference` (specbench_cli/scoring/quality.py)

    def reference_for(self, turn: int):
        """What turn `turn`'s answer is scored against (None when the question is not scored)."""
        if not self.scorer or not self.reference or turn >= len(self.reference):
            return None
        return self.reference[turn]


class Task:
    """A suite of questions that owns its categories.

    categories: reported category -> display name, in table order (reports put categories
                no loaded task names after these, alphabetically).
    fold:       category in the source file -> reported category; the source name is kept
                as `Question.subcategory` (Spec-Bench's eight MT-bench sub-categories).
    scorers:    category -> quality scorer (specbench_cli/scoring/quality.py) for questions that carry
                a reference, e.g. Spec-Bench's math_reasoning -> gsm8k.
    Subclasses set `name`, `summary` and implement `load`.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    categories: ClassVar[dict[str, str]] = {}
    fold: ClassVar[dict[str, str]] = {}
    scorers: ClassVar[dict[str, str]] = {}
    takes_questions_file: ClassVar[bool] = True  # False: `--questions` would be ignored, so it is refused

    @classmethod
    def attach_scorers(cls, questions: list[Question]) -> list[Question]:
        """Set `scorer` on every question of a scored category that has a reference."""
        for q in questions:
            if q.scorer is None and q.reference and q.category in cls.scorers:
                q.scorer = cls.scorers[q.category]
        return questions

    @classmethod
    def load(cls, questions_path: Optional[str] = None) -> list[Question]:
        raise NotImplementedError

    @classmethod
    def reported(cls, category: str) -> str:
        """The category a row of this task is reported under."""
        return cls.fold.get(category, category)


def read_jsonl_questions(path: Path, task: str, fold: Optional[dict[str, str]] = None) -> list[Question]:
    """Read Spec-Bench-style JSONL: `question_id`, `category`, `turns` (list of str) per line.

    `fold` maps a file category to the reported one (the file's name becomes the
    subcategory). Malformed input is a UsageError naming the file and line.
    """
    questions = []
    first_line: dict[str, int] = {}
    for lineno, row in read_objects(path, "questions file"):
        turns = row.get("turns")
        if isinstance(turns, str):
            turns = [turns]
        # a list only: a dict would pass as its keys, a number would not iterate
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise UsageError(f"{path}:{lineno}: 'turns' must be a non-empty list of non-empty strings")
        if "question_id" not in row:
            raise UsageError(f"{path}:{lineno}: missing 'question_id'")
        qid = row["question_id"]
        if isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
            raise UsageError(f"{path}:{lineno}: 'question_id' must be a string or an integer")
        if str(qid) in first_line:  # rows are keyed by question id: a second one would be dropped
            raise UsageError(f"{path}:{lineno}: question_id {qid!r} repeats the one on line {first_line[str(qid)]}")
        first_line[str(qid)] = lineno
        if not isinstance(row.get("category", "default"), str) or not row.get("category", "default").strip():
            raise UsageError(f"{path}:{lineno}: 'category' must be a non-empty string")
        cat = row.get("category", "default")
        sub = None
        if fold and cat in fold:
            cat, sub = fold[cat], cat
        reference = row.get("reference")
        if isinstance(reference, str):
            reference = [reference]
        scorer = row.get("scorer")
        if scorer is not None:
            from specbench_cli.scoring.quality import check_scorer

            check_scorer(scorer, f"{path}:{lineno}")
        questions.append(Question(task=task, id=str(row["question_id"]), category=cat, turns=list(turns),
                                  subcategory=sub, reference=reference, scorer=scorer))
    if not questions:
        raise UsageError(f"{path}: no questions in file")
    return questions


def select(questions: list[Question], categories: Optional[list[str]] = None, limit: Optional[int] = None,
           question_ids: Optional[list[str]] = None) -> list[Question]:
    """Filter by category and id, then keep the first `limit` questions of each category."""
    if categories:
        known = {q.category for q in questions} | {q.subcategory for q in questions if q.subcategory}
        for c in categories:
            if c not in known:
                from specbench_cli.errors import unknown

                raise unknown("category", c, known)
        questions = [q for q in questions if q.category in categories or q.subcategory in categories]
    if question_ids:
        wanted = set(question_ids)
        missing = wanted - {q.id for q in questions}
        if missing:
            raise UsageError(f"question ids not found: {', '.join(sorted(missing))}")
        questions = [q for q in questions if q.id in wanted]
    if limit is not None:
        if limit < 1:
            raise UsageError("--limit must be at least 1")
        seen: dict[str, int] = {}
        kept = []
        for q in _round_robin_subcategories(questions):
            if seen.get(q.category, 0) < limit:
                kept.append(q)
                seen[q.category] = seen.get(q.category, 0) + 1
        questions = kept
    return questions


def _round_robin_subcategories(questions: list[Question]) -> list[Question]:
    """Reorder so a per-category limit samples every subcategory (MT-bench's writing, roleplay, ...)."""
    rank: dict[tuple, int] = {}
    counts: dict[tuple, int] = {}
    for q in questions:
        key = (q.category, q.subcategory)
        rank[id(q)] = counts.get(key, 0)
        counts[key] = rank[id(q)] + 1
    order = {q.category: i for i, q in reversed(list(enumerate(questions)))}
    return sorted(questions, key=lambda q: (order[q.category], rank[id(q)]))
