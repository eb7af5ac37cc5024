"""One sample row: the line `specbench run` appends to samples.jsonl per (method, question,
turn, repeat), the reader validates, and metrics consume. docs/results-format.md documents
every field; this class is the definition.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.models.pieces import token_pieces
from specbench_cli.options import is_int

STATUSES = ("ok", "error")
# the measured parts of a decoding step, in the order reports show them ("other" is the rest)
PARTS = ("propose", "forward", "accept", "commit", "observe")


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
    difficulty: Optional[str] = None         # the question's difficulty where its suite gives one (SPEED-Bench)
    question_id: str
    turn: int
    repeat: int
    block_complexity: int = 0
    temperature: float = 0.0
    top_p: float = 1.0
    status: str
    error: Optional[str] = None
    prompt_tokens: int = 0
    max_new_tokens: Optional[int] = None     # this turn's cap: --max-new-tokens, or less where the context ends
    new_tokens: int = 0
    wall_time: float = 0.0
    prefill_time: float = 0.0
    steps: int = 0
    accept_lengths: list = field(default_factory=list)
    draft_sizes: list = field(default_factory=list)
    draft_path_lengths: Optional[list] = None  # per step: draft positions on the path the target took (older rows: absent)
    budget_used: list = field(default_factory=list)
    step_draft_ms: list = field(default_factory=list)
    step_verify_ms: list = field(default_factory=list)
    draft_time: float = 0.0
    verify_time: float = 0.0
    overhead_time: float = 0.0
    # the step split (docs/metrics.md, "Where the time goes"); null where not measured (CUDA
    # without --time-steps) and absent in older rows
    draft_depths: Optional[list] = None      # per step: the deepest acceptable draft node (draft positions)
    step_propose_ms: Optional[list] = None
    step_forward_ms: Optional[list] = None
    step_accept_ms: Optional[list] = None
    step_commit_ms: Optional[list] = None
    step_observe_ms: Optional[list] = None
    propose_time: Optional[float] = None
    forward_time: Optional[float] = None
    accept_time: Optional[float] = None
    commit_time: Optional[float] = None
    observe_time: Optional[float] = None
    output_ids: list = field(default_factory=list)
    output_text: str = ""
    output_pieces: Optional[list] = None     # the text of each output token, one per output id (older rows: absent)
    method_stats: Optional[dict] = None      # a method's own counters (fastcot: iterations, approx tokens...)
    scorer: Optional[str] = None             # quality scorer of this question (specbench_cli/scoring/quality.py)
    reference: Any = None                    # what the scorer compares against (this turn's reference)
    ar_match: Optional[bool] = None
    first_mismatch: Optional[int] = None
    batch_size: int = 1                      # sequences decoded together (--batch-size); 1 in older rows
    batch_id: Optional[int] = None           # which batch of the run (group of questions) this turn was in; None at 1
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


# What a `Generation` (decoding/decoder.py) measured that a row records under the same name; the
# step split (`PARTS`) only where it was measured, so a row without it keeps null there.
MEASURED = ("prompt_tokens", "steps", "wall_time", "prefill_time", "accept_lengths", "draft_sizes", "budget_used",
            "draft_path_lengths", "step_draft_ms", "step_verify_ms", "draft_time", "verify_time", "overhead_time",
            "draft_depths", "output_ids")
SPLIT = (*(f"step_{part}_ms" for part in PARTS), *(f"{part}_time" for part in PARTS))


def record_generation(row: SampleRow, gen: Any, tokenizer: Any) -> SampleRow:
    """`row` (whose turn, decoded how) filled with what `gen` measured: the one place a
    generation becomes row fields. `MEASURED` as they are, `SPLIT` where `gen` has the step
    split, the answer's length, text and per-token pieces (for `report --html`) through
    `tokenizer`, and the drafter's own counters as `method_stats`."""
    for name in MEASURED:
        setattr(row, name, getattr(gen, name))
    if gen.propose_time is not None:  # the step split (absent on CUDA without --time-steps)
        for name in SPLIT:
            setattr(row, name, getattr(gen, name))
    row.new_tokens = len(gen.output_ids)
    row.method_stats = gen.stats
    row.output_text = tokenizer.decode(gen.output_ids, skip_special_tokens=True)
    row.output_pieces = token_pieces(tokenizer, gen.output_ids)
    return row


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


# The largest integer a float holds exactly: metrics turn counts and times into floats, and a
# bigger integer (JSON has no limit) overflows them.
MAX_INT = 2 ** 53


def _real(v: object) -> bool:
    """A number that is a finite float once converted (not NaN, not infinite, not huge)."""
    if is_int(v):
        return -MAX_INT <= v <= MAX_INT  # type: ignore[operator]
    return isinstance(v, float) and math.isfinite(v)


def _time(v: object) -> bool:
    """A duration: a finite number >= 0."""
    return _real(v) and v >= 0  # type: ignore[operator]


def _count(v: object) -> bool:
    """A count, length, position or token id: an integer in 0..MAX_INT."""
    return is_int(v) and 0 <= v <= MAX_INT  # type: ignore[operator]


def _counts(v: object) -> bool:
    return isinstance(v, list) and all(_count(x) for x in v)


def _times(v: object) -> bool:
    return isinstance(v, list) and all(_time(x) for x in v)


def _opt(check):
    return lambda v: v is None or check(v)


# Field -> (check, what it wants). Metrics sum, divide and compare these, so a row that passes
# cannot crash them: every number is finite (NaN, Infinity and integers past 2^53 are refused),
# and every time, count, length and token id is >= 0. question_id may be a number (files
# written by other tools).
FIELD_TYPES: dict[str, tuple[Any, str]] = {
    "method": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "method_label": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "method_params": (_opt(lambda v: isinstance(v, dict)), "an object or null"),
    "lossless": (_opt(lambda v: isinstance(v, bool)), "true, false or null"),
    "extra_params": (_count, "an integer >= 0"),
    "structure": (_opt(lambda v: isinstance(v, str)), "a string or null"),
    "task": (_opt(lambda v: isinstance(v, str)), "a string"),
    "category": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "subcategory": (_opt(lambda v: isinstance(v, str)), "a string or null"),
    "difficulty": (_opt(lambda v: isinstance(v, str)), "a string or null"),
    "question_id": (lambda v: (isinstance(v, str) and v != "") or is_int(v), "a string or an integer"),
    "turn": (lambda v: is_int(v) and 0 <= v < 1000, "an integer in 0..999"),
    "repeat": (lambda v: is_int(v) and 0 <= v < 100000, "an integer >= 0"),
    "block_complexity": (_count, "an integer >= 0"),
    "temperature": (_time, "a finite number >= 0"),
    "top_p": (lambda v: _real(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "error": (_opt(lambda v: isinstance(v, str)), "a string or null"),
    "prompt_tokens": (_count, "an integer >= 0"),
    "new_tokens": (_count, "an integer >= 0"),
    "max_new_tokens": (_opt(_count), "an integer >= 0 or null"),
    "wall_time": (_time, "a finite number >= 0"),
    "prefill_time": (_time, "a finite number >= 0"),
    "steps": (_count, "an integer >= 0"),
    "accept_lengths": (_counts, "a list of integers >= 0"),
    "draft_sizes": (_counts, "a list of integers >= 0"),
    "draft_path_lengths": (_opt(_counts), "a list of integers >= 0 or null"),
    "budget_used": (_counts, "a list of integers >= 0"),
    "step_draft_ms": (_times, "a list of finite numbers >= 0"),
    "step_verify_ms": (_times, "a list of finite numbers >= 0"),
    "draft_time": (_time, "a finite number >= 0"),
    "verify_time": (_time, "a finite number >= 0"),
    "overhead_time": (_real, "a finite number"),  # the rest of the wall time: may round below 0
    "draft_depths": (_opt(_counts), "a list of integers >= 0 or null"),
    **{f"step_{part}_ms": (_opt(_times), "a list of finite numbers >= 0 or null") for part in PARTS},
    **{f"{part}_time": (_opt(_time), "a finite number >= 0 or null") for part in PARTS},
    "output_ids": (_counts, "a list of integers >= 0"),
    "output_text": (_opt(lambda v: isinstance(v, str)), "a string"),
    "output_pieces": (_opt(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
                      "a list of strings or null"),
    "ar_match": (_opt(lambda v: isinstance(v, bool)), "true, false or null"),
    "first_mismatch": (_opt(_count), "an integer >= 0 or null"),
    "batch_size": (lambda v: _count(v) and v >= 1, "an integer >= 1"),
    "batch_id": (_opt(_count), "an integer >= 0 or null"),
    "timestamp": (_opt(lambda v: isinstance(v, str)), "a string or null"),
    "scorer": (_opt(lambda v: isinstance(v, str) and v != ""), "a scorer name (string) or null"),
    "method_stats": (_opt(lambda v: isinstance(v, dict)), "an object or null"),
}
# Free-form fields (a method's options and counters, a scorer's reference): any JSON, but no
# NaN or Infinity anywhere inside.
NESTED = ("method_params", "method_stats", "reference")
# What an error row made from a row keeps (which turn it answers, and how); the rest is what was
# measured, reset to the defaults.
IDENTITY = ("method", "method_label", "method_params", "lossless", "extra_params", "structure", "task", "category",
            "subcategory", "difficulty", "question_id", "turn", "repeat", "block_complexity", "temperature", "top_p",
            "prompt_tokens", "max_new_tokens", "scorer", "reference", "batch_size", "batch_id", "timestamp")


def problem(row: object) -> Optional[str]:
    """Why `row` cannot be a samples.jsonl row ("'prefill_time' must be a finite number >= 0,
    got NaN"), or None when it can: an object with the keys metrics need, each of the type
    `FIELD_TYPES` gives, and no NaN or Infinity in the free-form fields (unknown keys are left
    alone)."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    if row.get("status") not in STATUSES:
        return f"status must be 'ok' or 'error', got {repr(row.get('status'))[:40]}"
    missing = [key for key in required_keys(row["status"]) if key not in row]
    if missing:
        return f"missing key(s) {', '.join(missing)}"
    for key in (*FIELD_TYPES, "reference"):
        if key in row and not fits(key, row[key]):
            return _wrong(key, row[key])
    return None


def _any(value: object) -> bool:
    return True


def fits(key: str, value: object) -> bool:
    """Whether `value` is one `FIELD_TYPES` allows for `key` (any value for a key it does not
    list), free of NaN and infinity throughout for the `NESTED` keys."""
    check, _ = FIELD_TYPES.get(key, (_any, "any value"))
    return bool(check(value)) and (key not in NESTED or _non_finite(value) is None)


def _wrong(key: str, value: object) -> str:
    check, wants = FIELD_TYPES.get(key, (_any, "any value"))
    if not check(value):
        return f"'{key}' must be {wants}, got {_short(value)}"
    return f"'{key}' must hold finite numbers only, got {_non_finite(value)}"


def _non_finite(value: object) -> Optional[str]:
    """'NaN at drafts.0' for the first NaN or infinity inside `value` (objects and lists walked
    without recursion), or None."""
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{_short(item)} at {path or 'the top'}"
        if isinstance(item, dict):
            stack += [(v, f"{path}.{k}" if path else str(k)) for k, v in reversed(list(item.items()))]
        elif isinstance(item, list):
            stack += [(v, f"{path}.{i}" if path else str(i)) for i, v in reversed(list(enumerate(item)))]
    return None


def error_row(row: dict, why: str) -> dict:
    """The error row stored instead of `row` when `problem(row)` is `why`: its `IDENTITY` fields
    (those of the right type), status "error", `error` "InvalidRow: WHY", the measured fields
    at their defaults. RuntimeFailure when even that is no row (an identity field a run always
    sets correctly is wrong: a bug, never written)."""
    kept = {key: row[key] for key in IDENTITY if key in row and fits(key, row[key])}
    values = {**defaults(), **kept, "status": "error", "error": f"InvalidRow: {why}"}
    out = {f.name: values[f.name] for f in dataclasses.fields(SampleRow) if f.name in values}
    still = problem(out)
    if still is not None:
        raise RuntimeFailure(f"refusing to write a row that is not one ({why}; as an error row: {still})")
    return out


def validate(row: object, where: str = "row") -> dict:
    """`row` unchanged, or a UsageError naming `where` and `problem(row)`."""
    why = problem(row)
    if why is not None:
        raise UsageError(f"{where}: {why}")
    return row  # type: ignore[return-value]


def _short(value: object) -> str:
    """A JSON value for an error line: at most 40 characters."""
    import json

    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def row_key(row: dict) -> tuple:
    """(method, task, question_id, turn, repeat, temperature): what resume matches finished rows
    on (a temperature sweep has one row of each at every temperature; older rows: 0)."""
    return (row["method"], row.get("task"), str(row["question_id"]), int(row["turn"]), int(row.get("repeat", 0)),
            float(row.get("temperature") or 0.0))

