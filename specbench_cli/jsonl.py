"""Reading JSON and JSONL input files with one clear error per bad file or line."""

from __future__ import annotations

import json
import zlib
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
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        except RecursionError:
            raise UsageError(f"{path}:{lineno}: not valid JSON (nested too deeply)") from None
        if not isinstance(row, dict):
            raise UsageError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


def read_lines(path: Path, opener=open) -> list[str]:
    """The lines of a UTF-8 text file; a UsageError naming the file (and line) if it is not
    UTF-8 or cannot be read. `opener` may be `gzip.open`."""
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as exc:  # gzip raises the last two for a damaged .gz
        raise UsageError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None


def read_json_object(path: Path, missing: str) -> dict:
    """Parse a JSON file that must hold one object; `missing` is the message for an absent file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(missing)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: not valid JSON ({str(exc)[:80] or 'nested too deeply'})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return doc
