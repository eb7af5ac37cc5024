"""`hf:PATH_OR_ID[:CONFIG][:SPLIT]`: questions from any dataset the `datasets` library reads.

PATH_OR_ID is a local data file (.parquet, .json, .jsonl, .csv, .arrow), a folder of such files or
one written by `Dataset.save_to_disk`, or a Hugging Face hub id (where the network allows). Rows
become questions through a field mapping (`Fields`): which column holds the prompt, its reference
answer, its category and its id. Without a mapping the prompt column is the first of
`QUESTION_FIELDS` the dataset has; a column of conversations (ShareGPT `{"from", "value"}` or
`{"role", "content"}` messages) gives one turn per user message.

No code from the dataset runs: `datasets` (>= 4) reads data files only, never loading scripts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from specbench_cli.errors import UsageError
from specbench_cli.tasks.base import Question, Task

PREFIX = "hf:"
QUESTION_FIELDS = ("turns", "conversations", "messages", "question", "prompt", "instruction", "input",
                   "problem", "text")
ID_FIELDS = ("question_id", "id")
FILE_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv", ".arrow": "arrow"}
USER_ROLES = {"human", "user"}
INSTALL = "pip install 'specbench-cli[hf]'"


def is_hf(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


@dataclass(frozen=True)
class Source:
    """A parsed `hf:` task name."""

    path: str
    config: Optional[str]
    split: Optional[str]

    @property
    def local(self) -> Optional[Path]:
        p = Path(self.path).expanduser()
        return p if p.exists() else None


@dataclass(frozen=True)
class Fields:
    """Which column is which; None = found by name (see the module doc)."""

    question: Optional[str] = None
    reference: Optional[str] = None
    category: Optional[str] = None
    id: Optional[str] = None
    scorer: Optional[str] = None


FIELD_FLAGS = ("question_field", "reference_field", "category_field", "id_field", "scorer")


def fields_of(source: Any) -> Fields:
    """The mapping from an object with FIELD_FLAGS attributes (RunConfig, sweep Grid); None -> defaults."""
    if source is None:
        return Fields()
    get = (lambda k: getattr(source, k, None))
    return Fields(question=get("question_field"), reference=get("reference_field"), category=get("category_field"),
                  id=get("id_field"), scorer=get("scorer"))


def parse(name: str) -> Source:
    """'hf:PATH_OR_ID[:CONFIG][:SPLIT]' -> Source; UsageError on a malformed name. Empty parts
    take their defaults ('hf:data.parquet::test' = no config, split test)."""
    body = name[len(PREFIX):]
    parts = body.split(":")
    if not parts[0].strip() or len(parts) > 3:
        raise UsageError(f"--tasks {name}: expected hf:PATH_OR_ID[:CONFIG][:SPLIT]")
    parts += [""] * (3 - len(parts))
    return Source(parts[0], parts[1] or None, parts[2] or None)


def check_source(name: str) -> Source:
    """Everything knowable before loading: the name's form, the library, a local path's kind."""
    src = parse(name)
    try:
        import datasets  # noqa: F401
    except ImportError:
        raise UsageError(f"--tasks {name} reads datasets through the `datasets` library: {INSTALL}") from None
    local = src.local
    if local is None and (src.path.startswith((".", "/", "~")) or Path(src.path).suffix in FILE_BUILDERS):
        raise UsageError(f"--tasks {name}: file or folder not found: {src.path}")
    if local is not None and local.is_file() and local.suffix not in FILE_BUILDERS:
        raise UsageError(f"--tasks {name}: {local.name} is not a data file datasets reads "
                         f"({', '.join(FILE_BUILDERS)})")
    return src


def load_rows(name: str) -> tuple[list[dict], str]:
    """The rows of the dataset `name` names, and a short label for it (its file or id)."""
    src = check_source(name)
    import datasets

    local = src.local
    label = (local.stem if local and local.is_file() else (local.name if local else src.path.rsplit("/", 1)[-1]))
    try:
        if local is not None and local.is_dir() and ((local / "dataset_info.json").is_file()
                                                     or (local / "state.json").is_file()):
            ds = datasets.load_from_disk(str(local))
            if isinstance(ds, datasets.DatasetDict):
                ds = _pick_split(ds, src, name)
        elif local is not None and local.is_file():
            ds = datasets.load_dataset(FILE_BUILDERS[local.suffix], data_files=str(local),
                                       split=src.split or "train")
        else:
            ds = datasets.load_dataset(str(local) if local else src.path, src.config)
            ds = _pick_split(ds, src, name) if isinstance(ds, datasets.DatasetDict) else ds
    except UsageError:
        raise
    except FileNotFoundError as e:
        raise UsageError(f"--tasks {name}: not found ({_first_line(e)})") from None
    except ValueError as e:  # unknown split or config, unreadable file
        raise UsageError(f"--tasks {name}: {_first_line(e)}") from None
    except Exception as e:  # offline hub, parse errors in the data files
        raise UsageError(f"--tasks {name}: cannot load ({type(e).__name__}: {_first_line(e)})") from None
    return [dict(r) for r in ds], label


def _pick_split(ds: Any, src: Source, name: str):
    if src.split:
        if src.split not in ds:
            raise UsageError(f"--tasks {name}: no split '{src.split}' (has {', '.join(ds)})")
        return ds[src.split]
    if len(ds) == 1:
        return next(iter(ds.values()))
    for preferred in ("test", "validation", "train"):
        if preferred in ds:
            return ds[preferred]
    raise UsageError(f"--tasks {name}: name a split (has {', '.join(ds)}), e.g. {name}::{next(iter(ds))}")


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def turns_of(value: Any, where: str) -> list[str]:
    """A prompt cell -> user turns: a string, a list of strings, or a conversation."""
    if isinstance(value, str) and value.strip():
        return [value]
    if isinstance(value, list) and value and all(isinstance(t, str) and t.strip() for t in value):
        return list(value)
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        turns = []
        for m in value:
            role = m.get("from", m.get("role"))
            text = m.get("value", m.get("content"))
            if role in USER_ROLES and isinstance(text, str) and text.strip():
                turns.append(text)
        if turns:
            return turns
    raise UsageError(f"{where}: the prompt must be a non-empty string, a list of strings, or a conversation "
                     f"with user turns (ShareGPT from/value or role/content)")


def to_questions(rows: list[dict], name: str, label: str, fields: Fields) -> list[Question]:
    """Rows -> questions through `fields`; UsageError naming the row and column on bad data."""
    if not rows:
        raise UsageError(f"--tasks {name}: the dataset has no rows")
    columns = set(rows[0])
    question_field = fields.question or next((f for f in QUESTION_FIELDS if f in columns), None)
    if question_field is None:
        raise UsageError(f"--tasks {name}: no prompt column found (looked for {', '.join(QUESTION_FIELDS)}); "
                         f"name it with --question-field (columns: {', '.join(sorted(columns))})")
    id_field = fields.id or next((f for f in ID_FIELDS if f in columns), None)
    for flag, column in (("--question-field", question_field), ("--reference-field", fields.reference),
                         ("--category-field", fields.category), ("--id-field", id_field)):
        if column is not None and column not in columns:
            raise UsageError(f"--tasks {name}: {flag} {column}: no such column "
                             f"(columns: {', '.join(sorted(columns))})")
    if fields.scorer and not fields.reference:
        raise UsageError("--scorer needs --reference-field (the column of reference answers)")
    questions, first_row = [], {}
    for i, row in enumerate(rows):
        where = f"{name} row {i}"
        turns = turns_of(row.get(question_field), f"{where}, column {question_field}")
        qid = str(row[id_field]) if id_field else str(i)
        if qid in first_row:
            raise UsageError(f"{where}: id {qid!r} repeats row {first_row[qid]} (name a unique column with --id-field)")
        first_row[qid] = i
        category = str(row[fields.category]) if fields.category else label
        reference = None
        if fields.reference:
            ref = row.get(fields.reference)
            reference = [ref] if isinstance(ref, (str, int, float)) else ref
        questions.append(Question(task=name, id=qid, category=category, turns=turns, reference=reference,
                                  scorer=fields.scorer))
    return questions


def hf_task(name: str, fields: Fields = Fields()) -> type[Task]:
    """A Task class for the `hf:` name, with its field mapping bound."""

    class HfDataset(Task):
        summary = "rows of a dataset read through `datasets`"
        takes_questions_file = False

        @classmethod
        def load(cls, questions_path=None) -> list[Question]:
            rows, label = load_rows(name)
            return to_questions(rows, name, label, fields)

    HfDataset.name = name
    return HfDataset
