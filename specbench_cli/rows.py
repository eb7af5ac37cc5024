"""One sample row: the line `specbench run` appends to samples.jsonl per (method, question,
turn, repeat), the reader validates, and metrics consume. docs/results-format.md documents
every field; this class is the definition.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from specbench_cli.errors import UsageError

STATUSES = ("ok", "error")


@dataclass(kw_only=True)
class SampleRow:
    """Identity and outcome of one generated turn. Fields without a default are required in
    every row; `OK_REQUIRED` also in every `ok` row. Older files may lack the others (they
    load with the defaults below)."""

    method: str
    method_label: str
    method_params: Optional[dict] = None
    lossless: Optional[bool] = None
    extra_params: int = 0
    structure: Optional[str] = None          # "chain" | "tree" | "none" (absent in older rows)
    task: str = ""
    category: str
    subcategory: Optional[str] = None
    question_id: str
    turn: int
    repeat: int
    block_complexity: int = 0
    temperature: float = 0.0
    top_p: float = 1.0
    status: str
    error: Optional[str] = None
    prompt_tokens: int = 0
    new_tokens: int = 0
    wall_time: float = 0.0
    prefill_time: float = 0.0
    steps: int = 0
    accept_lengths: list = field(default_factory=list)
    draft_sizes: list = field(default_factory=list)
    budget_used: list = field(default_factory=list)
    step_draft_ms: list = field(default_factory=list)
    step_verify_ms: list = field(default_factory=list)
    draft_time: float = 0.0
    verify_time: float = 0.0
    overhead_time: float = 0.0
    output_ids: list = field(default_factory=list)
    output_text: str = ""
    method_stats: Optional[dict] = None      # a method's own counters (fastcot: iterations, approx tokens...)
    scorer: Optional[str] = None             # quality scorer of this question (specbench_cli/quality.py)
    reference: Any = None                    # what the scorer compares against (this turn's reference)
    ar_match: Optional[bool] = None
    first_mismatch: Optional[int] = None
    timestamp: Optional[str] = None

    OK_REQUIRED: ClassVar[tuple[str, ...]] = ("new_tokens", "wall_time", "steps", "accept_lengths")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to samples.jsonl (field order as above)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SampleRow":
        """A row from a parsed line (validated; unknown keys are ignored)."""
        validate(data)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def key(self) -> tuple:
        return row_key(self.to_dict())


def required_keys(status: Optional[str] = None) -> tuple[str, ...]:
    """Keys a row must carry (plus the measured ones when `status == "ok"`)."""
    base = tuple(f.name for f in dataclasses.fields(SampleRow)
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    return base + (SampleRow.OK_REQUIRED if status == "ok" else ())


def defaults() -> dict[str, Any]:
    """Values for the optional keys a row may lack (older writers)."""
    out = {}
    for f in dataclasses.fields(SampleRow):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def validate(row: object, where: str = "row") -> dict:
    """UsageError naming `where` unless `row` is an object with the keys metrics need."""
    if not isinstance(row, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(row).__name__}")
    missing = [key for key in required_keys(row.get("status")) if key not in row]
    if missing:
        raise UsageError(f"{where}: missing key(s) {', '.join(missing)}")
    if row["status"] not in STATUSES:
        raise UsageError(f"{where}: status must be 'ok' or 'error', got {row['status']!r}")
    return row


def row_key(row: dict) -> tuple:
    """(method, task, question_id, turn, repeat): what resume matches finished rows on."""
    return (row["method"], row.get("task"), str(row["question_id"]), int(row["turn"]), int(row.get("repeat", 0)))


def validate_row(row: object, path: Path, lineno: int) -> dict:
    """`validate` with a file:line location."""
    return validate(row, f"{path}:{lineno}")
