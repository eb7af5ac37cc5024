"""`hf:PATH_OR_ID[:CONFIG][:SPLIT]`: questions from any dataset the `datasets` library reads.

PATH_OR_ID is a local data file (.parquet, .json, .jsonl, .csv, .arrow), a folder of such files or
one written by `Dataset.save_to_disk`, or a Hugging Face hub id (where the network allows). Rows
become questions through a field mapping (`Fields`): which column holds the prompt, its reference
answer, its category and its id. Without a mapping the prompt column is the first of
`QUESTION_FIELDS` the dataset has; a column of conversations (ShareGPT `{"from", "value"}` or
`{"role", "content"}` messages) gives one turn per user message.

No code from the dataset runs: `datasets` (>= 4) reads data files only, never loading scripts.

Bounded before `datasets` reads anything (`check_local_data`): the data files together hold at
most `MAX_DATA_BYTES`, and each passes the guarded reader every input file passes
(`jsonl.check_data_file`): a regular file (a FIFO or device is refused by type) of at most
`MAX_INPUT_BYTES`, UTF-8 where it is text; JSON and JSONL files
nest at most `MAX_JSON_DEPTH` levels (deeper ones crash the JSON reader `datasets` uses); CSV,
JSON, Parquet and Arrow files have at most `MAX_COLUMNS` columns. After loading, at most
`MAX_ROWS` rows are turned into questions (a split slice such as `hf:ID::train[:1000]` takes
fewer). A hub id with the hub unreachable is looked up in the local datasets cache only: one
line, no retries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from specbench_cli.errors import UsageError, check_not_special
from specbench_cli.jsonl import check_data_file
from specbench_cli.tasks import TaskSource
from specbench_cli.tasks.base import Question, Task

PREFIX = "hf:"
QUESTION_FIELDS = ("turns", "conversations", "messages", "question", "prompt", "instruction", "input",
                   "problem", "text")
ID_FIELDS = ("question_id", "id")
FILE_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv", ".arrow": "arrow"}
USER_ROLES = {"human", "user"}
INSTALL = "pip install 'specbench-cli[hf]'"
MAX_COLUMNS = 4096                 # columns of a data file (the widest real datasets have a few hundred)
MAX_ROWS = 1_000_000               # rows turned into questions or training examples
MAX_DATA_BYTES = 8 << 30           # all local data files of one hf: name together
MAX_HEADER_BYTES = 1 << 20         # a CSV header line
MAX_DATA_FILES = 10_000            # data files in a local folder


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
    """The mapping from an object with FIELD_FLAGS attributes (a RunConfig's task section, a sweep
    Grid); None -> defaults."""
    if source is None:
        return Fields()
    get = (lambda k: getattr(source, k, None))
    return Fields(question=get("question_field"), reference=get("reference_field"), category=get("category_field"),
                  id=get("id_field"), scorer=get("scorer"))


def parse(name: str) -> Source:
    """'hf:PATH_OR_ID[:CONFIG][:SPLIT]' -> Source; UsageError on a malformed name. Empty parts
    take their defaults ('hf:data.parquet::test' = no config, split test)."""
    body = name[len(PREFIX):]
    parts = re.split(r":(?![^\[\]]*\])", body)  # a split slice (train[:100]) keeps its colon
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
    check_not_special(src.path, f"--tasks {name}:")
    local = src.local
    if local is None and (src.path.startswith((".", "/", "~")) or Path(src.path).suffix in FILE_BUILDERS):
        raise UsageError(f"--tasks {name}: file or folder not found: {src.path}")
    if local is not None and local.is_file() and local.suffix not in FILE_BUILDERS:
        raise UsageError(f"--tasks {name}: {local.name} is not a data file datasets reads "
                         f"({', '.join(FILE_BUILDERS)})")
    return src


def data_files(local: Path) -> list[Path]:
    """The data files `datasets` would read from a local file or folder (by suffix)."""
    if local.is_file():
        return [local]
    files = []
    for p in sorted(local.rglob("*")):
        if p.suffix in FILE_BUILDERS and not any(part.startswith(".") for part in p.relative_to(local).parts):
            files.append(p)
            if len(files) > MAX_DATA_FILES:
                raise UsageError(f"{local}: more than {MAX_DATA_FILES} data files")
    return files


def _columns(path: Path) -> int | None:
    """How many columns a data file has, read from its header alone (None: not knowable cheaply)."""
    suffix = path.suffix
    if suffix == ".csv":
        import csv

        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            header = f.readline(MAX_HEADER_BYTES + 1)
        if len(header) > MAX_HEADER_BYTES:
            raise UsageError(f"{path}: the CSV header line is longer than {MAX_HEADER_BYTES >> 20} MB")
        return len(next(csv.reader([header]), []))
    if suffix in (".json", ".jsonl"):
        import json

        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(8 << 20)
        start = text.lstrip()
        if start.startswith("["):
            start = start[1:].lstrip()
        try:
            first, _ = json.JSONDecoder().raw_decode(start)
        except ValueError:
            return None
        return len(first) if isinstance(first, dict) else None
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if suffix == ".parquet":
            return pq.ParquetFile(str(path)).metadata.num_columns
        if suffix == ".arrow":
            with pa.memory_map(str(path)) as source:
                return len(pa.ipc.open_stream(source).schema)
    except Exception:  # noqa: BLE001 - damaged files are named by `datasets` when it reads them
        return None
    return None


def check_local_data(name: str, local: Path) -> None:
    """Before `datasets` reads a local file or folder: regular files only, their total size,
    JSON nesting and column counts (see the module doc); one UsageError naming the file."""
    files = data_files(local)
    total = 0
    for path in files:
        check_not_special(path, f"--tasks {name}:")
        total += path.stat().st_size
        if total > MAX_DATA_BYTES:
            raise UsageError(f"--tasks {name}: the data files hold more than {MAX_DATA_BYTES >> 30} GB")
    for path in files:
        check_data_file(path, f"--tasks {name}:")  # the guarded reader's checks: size, UTF-8, nesting
        columns = _columns(path)
        if columns is not None and columns > MAX_COLUMNS:
            raise UsageError(f"--tasks {name}: {path} has {columns} columns, more than {MAX_COLUMNS}")


class _Offline:
    """`datasets` and `huggingface_hub` in offline mode for the duration (the local cache only)."""

    def __enter__(self):
        import datasets
        from huggingface_hub import constants

        self.saved = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
        datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
        return self

    def __exit__(self, *exc):
        import datasets
        from huggingface_hub import constants

        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = self.saved


def load_rows(name: str) -> tuple[list[dict], str]:
    """The rows of the dataset `name` names, and a short label for it (its file or id)."""
    import contextlib

    src = check_source(name)
    import datasets

    local = src.local
    label = (local.stem if local and local.is_file() else (local.name if local else src.path.rsplit("/", 1)[-1]))
    if local is not None:
        check_local_data(name, local)
    offline = False
    if local is None:
        from specbench_cli.models.load import hub_reachable

        offline = not hub_reachable()
    quiet = local is not None and datasets.is_progress_bar_enabled()
    if quiet:  # "Generating train split" bars for a local file are noise around a one-line error
        datasets.disable_progress_bars()
    try:
        with _Offline() if offline else contextlib.nullcontext():
            if local is not None and local.is_dir() and ((local / "dataset_info.json").is_file()
                                                         or (local / "state.json").is_file()):
                ds = datasets.load_from_disk(str(local))
                if isinstance(ds, datasets.DatasetDict):
                    ds = _pick_split(ds, src, name)
                elif src.split and (m := SLICE.fullmatch(src.split)):  # one saved split: its slice
                    ds = _slice(ds, m)
            elif local is not None and local.is_file():
                ds = datasets.load_dataset(FILE_BUILDERS[local.suffix], data_files=str(local),
                                           split=src.split or "train")
            elif src.split and "[" in src.split:  # a slice: `datasets` takes it as the split
                ds = datasets.load_dataset(str(local) if local else src.path, src.config, split=src.split)
            else:
                ds = datasets.load_dataset(str(local) if local else src.path, src.config)
                ds = _pick_split(ds, src, name) if isinstance(ds, datasets.DatasetDict) else ds
    except UsageError:
        raise
    except Exception as e:
        if offline:
            raise UsageError(f"--tasks {name}: {src.path} is not in the local datasets cache and the Hugging Face "
                             f"hub is unreachable; pass a local data file or folder (hf:PATH)") from None
        if isinstance(e, FileNotFoundError):
            raise UsageError(f"--tasks {name}: not found ({_first_line(e)})") from None
        if isinstance(e, ValueError):  # unknown split or config, unreadable file
            raise UsageError(f"--tasks {name}: {_first_line(e)}") from None
        # offline hub, parse errors in the data files
        raise UsageError(f"--tasks {name}: cannot load ({type(e).__name__}: {_first_line(e)})") from None
    finally:
        if quiet:
            datasets.enable_progress_bars()
    if ds.num_rows > MAX_ROWS:
        raise UsageError(f"--tasks {name}: {ds.num_rows} rows, more than {MAX_ROWS}; take a slice of a split, "
                         f"e.g. hf:{src.path}:{src.config or ''}:{src.split or 'train'}[:1000]")
    if len(ds.column_names) > MAX_COLUMNS:
        raise UsageError(f"--tasks {name}: {len(ds.column_names)} columns, more than {MAX_COLUMNS}")
    return [dict(r) for r in ds], label


SLICE = re.compile(r"([^\[]+)\[(\d*):(\d*)\]")  # train[:1000], train[10:20]


def _slice(ds: Any, m: "re.Match") -> Any:
    n = ds.num_rows
    start, stop = int(m.group(2) or 0), min(n, int(m.group(3) or n))
    return ds.select(range(min(start, stop), stop))


def _pick_split(ds: Any, src: Source, name: str):
    if src.split:
        m = SLICE.fullmatch(src.split)
        split = m.group(1) if m else src.split
        if split not in ds:
            raise UsageError(f"--tasks {name}: no split '{split}' (has {', '.join(ds)})")
        return _slice(ds[split], m) if m else ds[split]
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


def task_for(name: str, settings: Any = None) -> type[Task]:
    """The Task class of an `hf:` name, checked as far as it can be before reading (`check_source`),
    with the column mapping of `settings` (a RunConfig's task section, a sweep grid or None)."""
    check_source(name)
    return hf_task(name, fields_of(settings))


SOURCE = TaskSource(PREFIX + "PATH_OR_ID[:CONFIG][:SPLIT]",
                    "rows of any dataset `datasets` reads: a local data file or folder, or a hub id", task_for)
