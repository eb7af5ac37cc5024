"""Reading JSON and JSONL input files with one clear error per bad file or line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from specbench_cli.errors import UsageError


def read_objects(path: Path, what: str = "file") -> Iterator[tuple[int, dict]]:
    """Yield `(line number, object)` for each non-blank line of a JSONL file.

    A missing file, a line that is not JSON, or a line that is not a JSON object is a
    UsageError naming the file and line (`PATH:LINE: ...`).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise UsageError(f"{what} not found: {path}")
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, row


def read_json_object(path: Path, missing: str) -> dict:
    """Parse a JSON file that must hold one object; `missing` is the message for an absent file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(missing)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return doc
