"""The run folder: `manifest.json` + `samples.jsonl` (format: docs/results-format.md).

Writing: `RunFolder` creates the folder, appends rows one by one (flushed and fsynced, so an
interrupted run keeps every finished row and `--resume` skips them) and repairs a torn last
line before appending again. A row is checked before it is written (`rows.problem`): one the
readers would refuse (NaN or a negative time from an engine's reply) is stored as an error row
naming the field, never as it came.

Reading: `load_run` never guesses, and one bad line never costs the rest. Damage to the folder
(no folder, a missing or broken manifest, no samples.jsonl) raises `UsageError` naming the file.
Damage to one line of samples.jsonl (not UTF-8, not JSON, not an object, a wrong type, NaN or
a negative time: written by an older version, cut short by a crash, or edited) skips that line
with a warning in `Run.warnings` naming its file:line and field: the turn counts as not run, so
`report` shows every other row and `specbench run --resume` runs that turn again. Rows are
`rows.SampleRow` objects as dicts; files written before a field existed still load (see
`rows.defaults`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import UsageError, check_not_link, check_not_special, check_output_folder, open_no_link
from specbench_cli.jsonl import MAX_JSON_DEPTH, read_json_object, too_deep
from specbench_cli.store.conditions import cpu_flags, cpu_model, gpu
from specbench_cli.store.rows import error_row, problem, row_key

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"


@dataclass
class Run:
    """One loaded run folder: its manifest, its rows, and any load warnings."""

    path: Path
    manifest: dict
    rows: list[dict]
    warnings: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        """The manifest's run id (falls back to the folder name)."""
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def model_name(self) -> str:
        """Short display name of the target model."""
        model = self.manifest.get("model") or {}
        return str(model.get("name") or model.get("ref") or "model")

    @property
    def model_params(self) -> int | None:
        """Parameter count of the target model, or None if the manifest lacks it."""
        params = (self.manifest.get("model") or {}).get("params")
        return int(params) if params else None

    def tagged_rows(self) -> list[dict]:
        """Rows with `run_id`, `model` and `target_params` added (what `metrics` groups by)."""
        tags = {"run_id": self.run_id, "model": self.model_name, "target_params": self.model_params}
        return [{**row, **tags} for row in self.rows]


def load_run(path: str | Path) -> Run:
    """Load one run folder; raise `UsageError` for anything missing or malformed."""
    folder = Path(path)
    if not folder.is_dir():
        raise UsageError(f"run folder not found: {folder}")
    manifest = read_manifest(folder / MANIFEST)
    rows, warnings = read_samples(folder / SAMPLES)
    return Run(path=folder, manifest=manifest, rows=rows, warnings=warnings)


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Load several run folders, in the given order."""
    return [load_run(p) for p in paths]


def all_rows(runs: Iterable[Run]) -> list[dict]:
    """The tagged rows of every run, concatenated."""
    return [row for run in runs for row in run.tagged_rows()]


def read_manifest(path: Path) -> dict:
    """Parse manifest.json; it must be a JSON object whose known keys have the right types."""
    doc = read_json_object(path, f"missing {path.name} in {path.parent} (is this a `specbench run` folder?)")
    return validate_manifest(doc, path)


# manifest key -> (check, what it wants); keys other tools add are left alone
_MANIFEST_TYPES = {
    "run_id": (lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string"),
    "config": (lambda v: isinstance(v, dict), "an object"),
    "model": (lambda v: isinstance(v, dict), "an object"),
    "methods": (lambda v: isinstance(v, dict), "an object"),
    "created": (lambda v: v is None or isinstance(v, str), "a string"),
    "finished": (lambda v: v is None or isinstance(v, str), "a string or null"),
}
_MODEL_TYPES = {
    "name": (lambda v: v is None or isinstance(v, str), "a string"),
    "ref": (lambda v: v is None or isinstance(v, str), "a string"),
    "params": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0), "an integer"),
}


def validate_manifest(doc: dict, path: Path) -> dict:
    """`doc` unchanged, or a UsageError naming the file and the first key of the wrong type."""
    for where, table, obj in (("", _MANIFEST_TYPES, doc), ("model.", _MODEL_TYPES, doc.get("model") or {})):
        for key, (check, wants) in table.items():
            if key in obj and not check(obj[key]):
                raise UsageError(f"{path}: '{where}{key}' must be {wants}, got {json.dumps(obj[key])[:40]}")
    return doc


# damaged lines named one by one in the warnings; the rest are counted in one more line
NAMED_DAMAGE = 5


@dataclass
class Line:
    """One non-blank line of samples.jsonl: its number, its bytes, and either the row it holds or
    why it holds none (`damage`; `torn`: a final line cut short mid-write)."""

    lineno: int
    data: bytes
    row: Optional[dict] = None
    damage: Optional[str] = None
    torn: bool = False


def scan_samples(path: Path) -> list[Line]:
    """Every non-blank line of samples.jsonl, parsed and validated on its own: a line that is not
    UTF-8, not JSON, nested too deeply, not an object, or not a valid row (`rows.problem`: a
    wrong type, NaN, a negative time) carries its damage instead of a row. Lines are split at
    `\\n` only (an answer may hold U+2028 or U+0085 unescaped)."""
    if not path.is_file():
        raise UsageError(f"missing {path.name} in {path.parent}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    chunks = data.split(b"\n")
    last = max((i for i, chunk in enumerate(chunks) if chunk.strip()), default=-1)
    lines = []
    for i, chunk in enumerate(chunks):
        if chunk.strip():
            lines.append(_parse_line(i + 1, chunk, torn=i == last and i == len(chunks) - 1))
    return lines


def _parse_line(lineno: int, chunk: bytes, torn: bool) -> Line:
    """`chunk` as a Line; `torn`: the file's last bytes, without a newline (a write cut short)."""
    line = Line(lineno, chunk)
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        line.damage = f"not UTF-8 text (byte {exc.start})"
        return line
    if too_deep(text):
        line.damage = f"not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels)"
        return line
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        line.damage, line.torn = f"not valid JSON ({exc.msg})", torn
        return line
    except ValueError:  # what json.loads raises past JSONDecodeError: an integer of over 4300 digits
        line.damage = "not valid JSON (a number too long to read)"
        return line
    except RecursionError:
        line.damage = "not valid JSON (nested too deeply)"
        return line
    line.damage = problem(row)
    line.row = row if line.damage is None else None
    return line


def read_samples(path: Path) -> tuple[list[dict], list[str]]:
    """Parse samples.jsonl into rows; return (rows, warnings).

    A damaged line (`scan_samples`) is skipped with a warning naming its file:line and what is
    wrong (the field and value): readers then treat that turn as not run, so `report` shows the
    rest and `--resume` runs it again. A final line cut short by a crash is skipped with its own
    warning. Whole-folder damage (no folder, no or a broken manifest, no samples.jsonl) is a
    UsageError elsewhere; a file whose every line is damaged loads as no rows.
    """
    rows: list[dict] = []
    warnings: list[str] = []
    damaged = 0
    for line in scan_samples(path):
        if line.row is not None:
            rows.append(line.row)
        elif line.torn:
            warnings.append(f"{path}:{line.lineno}: skipped a truncated final line (crash mid-write?)")
        else:
            damaged += 1
            if damaged <= NAMED_DAMAGE:
                warnings.append(f"{path}:{line.lineno}: {line.damage}; row skipped (counted as not run)")
    if damaged > NAMED_DAMAGE:
        warnings.append(f"{path}: {damaged - NAMED_DAMAGE} more damaged line(s) skipped ({damaged} in all; "
                        f"the first {NAMED_DAMAGE} are named above)")
    return dedupe(rows, path, warnings), warnings


def dedupe(rows: list[dict], path: Path, warnings: list[str]) -> list[dict]:
    """The first row of each (method, task, question, turn, repeat); later copies (two writers
    at once, before run folders were locked) are dropped with one warning naming how many."""
    seen: set[tuple] = set()
    kept = []
    for row in rows:
        key = row_key(row)
        if key not in seen:
            seen.add(key)
            kept.append(row)
    if len(kept) < len(rows):
        warnings.append(f"{path}: ignored {len(rows) - len(kept)} duplicate row(s) (same method, question, turn "
                        f"and repeat); the first of each is used")
    return kept


# ----------------------------------------------------------------------------- writing


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def git_commit() -> Optional[str]:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    import torch
    import transformers

    from specbench_cli import __version__

    return {
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "specbench": __version__},
        "host": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                 "cpu_model": cpu_model(), "cpu_flags": cpu_flags(), "cpu_count": os.cpu_count(),
                 "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                 "gpu": gpu()},
        "git_commit": git_commit(),
    }


LOCK = "run.lock"


def check_output_dir(output_dir: str | Path) -> Path:
    """The folder new run folders go into (created with the first run folder); a UsageError
    before any model loads if it is a file or cannot be written."""
    return check_output_folder(output_dir, "--output-dir")


class RunFolder:
    """A run folder open for appending. Writers hold `lock()` (RUN/run.lock) while they write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest_path = path / MANIFEST
        self.samples_path = path / SAMPLES

    @classmethod
    def create(cls, output_dir: Path, manifest: dict) -> "RunFolder":
        run_id = new_run_id()
        path = Path(output_dir) / run_id
        path.mkdir(parents=True, exist_ok=False)
        store = cls(path)
        store.write_manifest({"run_id": run_id, "created": now_iso(), "finished": None, **manifest})
        store.samples_path.touch()
        return store

    @classmethod
    def open(cls, path: Path) -> "RunFolder":
        """An existing run folder to continue; a UsageError when it is none, or when a file the
        writer writes is a symbolic link (a folder from elsewhere may plant `run.lock -> FILE`) or
        a special file (reading a FIFO blocks)."""
        store = cls(Path(path))
        for name in (MANIFEST, SAMPLES, LOCK):
            check_not_special(check_not_link(store.path / name), "run folder file")
        if not store.manifest_path.is_file():
            raise UsageError(f"{path} is not a run folder (no {MANIFEST})")
        return store

    def read_manifest(self) -> dict:
        return read_manifest(self.manifest_path)

    def lock(self, note=lambda msg: None):
        """RUN/run.lock (sweep/lock.py's FolderLock): a second writer exits 2 naming the holder's pid;
        a lock left by a dead process is taken over with `note`."""
        from specbench_cli.store.lock import FolderLock

        return FolderLock(self.path, LOCK, "specbench run", note)

    def drop_rows(self, drop) -> int:
        """Rewrite samples.jsonl without the rows for which `drop(row)` is true (atomically:
        temp file, fsync, rename); return how many went. Damaged lines stay as they are (they
        are no row to drop, and what the readers cannot read is not specbench's to delete); a
        torn final line and later copies of a duplicated row go. Call with the lock held."""
        lines = scan_samples(self.samples_path) if self.samples_path.is_file() else []
        rows = dedupe([line.row for line in lines if line.row is not None], self.samples_path, [])
        kept = {id(row) for row in rows if not drop(row)}
        if len(kept) == len(rows):
            return 0
        text = b"".join(line.data + b"\n" if line.row is None else _line_bytes(line.row)
                        for line in lines if (line.row is None and not line.torn) or id(line.row) in kept)
        atomic_write(self.samples_path, text)
        return len(rows) - len(kept)

    def write_manifest(self, manifest: dict) -> None:
        """Atomically (atomic.py), so a planted link at the name is replaced, never written through."""
        atomic_write(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=False) + "\n")

    def update_manifest(self, **fields: Any) -> None:
        m = self.read_manifest()
        m.update(fields)
        self.write_manifest(m)

    def rows(self) -> list[dict]:
        """Finished rows; a torn last line (crash mid-write) and damaged lines are skipped (`read_samples`):
        their turns count as not run, so a resumed run makes them again."""
        if not self.samples_path.is_file():
            return []
        return read_samples(self.samples_path)[0]

    def warnings(self) -> list[str]:
        """What reading the rows warns about (a torn last line, damaged lines, duplicate rows): `--resume` says it."""
        return read_samples(self.samples_path)[1] if self.samples_path.is_file() else []

    def repair_tail(self) -> None:
        """Drop a torn final line so appends start on a fresh line."""
        if not self.samples_path.is_file():
            return
        fd = open_no_link(self.samples_path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.ftruncate(fd, os.pread(fd, size, 0).rfind(b"\n") + 1)
                os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, row: dict) -> None:
        """One row, flushed and fsynced; the file is opened with O_NOFOLLOW (a link is refused).

        Checked first (`rows.problem`): a row the readers would refuse (a NaN or negative
        `prefill_time` from an engine's reply, a wrong type) is turned into its error row in
        place (`rows.error_row`: status "error", the error naming the field and value), so the
        caller's dict is what the file holds and no reader ever meets it."""
        fd = open_no_link(self.samples_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "ab") as f:
            why = problem(row)
            if why is not None:
                replacement = error_row(row, why)
                row.clear()
                row.update(replacement)
            f.write(_line_bytes(row))
            f.flush()
            os.fsync(f.fileno())


def _line_bytes(row: dict) -> bytes:
    """`row` as one samples.jsonl line (UTF-8; no NaN). A text holding a lone surrogate (an
    engine's reply may carry `\\ud800`) is written with JSON's ASCII escapes instead, which read
    back to the same text; UTF-8 cannot hold it."""
    text = json.dumps(row, ensure_ascii=False, allow_nan=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(row, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")
