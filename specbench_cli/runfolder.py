"""Read result folders written by `specbench run` (see docs/results-format.md).

A run folder holds `manifest.json` and `samples.jsonl`. Loading never guesses: a missing
folder or file, or a malformed line, raises `UsageError` naming the file (and line). The one
exception is a final line cut short by a crash mid-write: it is skipped and recorded in
`Run.warnings`, because `specbench run --resume` re-runs that turn anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import read_json_object

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"

# Keys every row must carry to be grouped and paired.
REQUIRED_KEYS = ("method", "method_label", "category", "question_id", "turn", "repeat", "status")
# Keys an `ok` row must carry to be measured.
REQUIRED_OK_KEYS = ("new_tokens", "wall_time", "steps", "accept_lengths")


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
    """Parse manifest.json; it must be a JSON object."""
    return read_json_object(path, f"missing {path.name} in {path.parent} (is this a `specbench run` folder?)")


def read_samples(path: Path) -> tuple[list[dict], list[str]]:
    """Parse samples.jsonl into rows; return (rows, warnings).

    Blank lines are ignored. A malformed last line is taken to be a write cut short by a
    crash and skipped with a warning; a malformed line anywhere else is an error.
    """
    if not path.is_file():
        raise UsageError(f"missing {path.name} in {path.parent}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc})") from exc
    numbered = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
    rows: list[dict] = []
    warnings: list[str] = []
    for position, (lineno, line) in enumerate(numbered):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if position == len(numbered) - 1:
                warnings.append(f"{path}:{lineno}: skipped a truncated final line (crash mid-write?)")
                continue
            raise UsageError(f"{path}:{lineno}: malformed JSON ({exc.msg})") from exc
        rows.append(validate_row(row, path, lineno))
    return rows, warnings


def validate_row(row: object, path: Path, lineno: int) -> dict:
    """Check that a parsed line is an object with the keys metrics need."""
    if not isinstance(row, dict):
        raise UsageError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
    required = REQUIRED_KEYS + (REQUIRED_OK_KEYS if row.get("status") == "ok" else ())
    missing = [key for key in required if key not in row]
    if missing:
        raise UsageError(f"{path}:{lineno}: missing key(s) {', '.join(missing)}")
    if row["status"] not in ("ok", "error"):
        raise UsageError(f"{path}:{lineno}: status must be 'ok' or 'error', got {row['status']!r}")
    return row
