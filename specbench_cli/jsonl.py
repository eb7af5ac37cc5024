"""Reading JSON and JSONL input files with one clear error per bad file or line.

Nesting is bounded before any parser sees the text (`too_deep`): a JSON value nested deeper
than `MAX_JSON_DEPTH` levels is refused by name instead of reaching a recursive parser.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Any, Iterator

from specbench_cli.errors import UsageError, check_not_special

MAX_JSON_DEPTH = 100  # arrays/objects inside each other; real question, run and config files use < 10
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_SQUARE = bytes.maketrans(b"{}", b"[]")
_OTHERS = bytes(b for b in range(256) if b not in b"[]{}")


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Does JSON `text` nest arrays/objects more than `limit` levels deep? Strings are skipped and
    nothing recurses: short texts drop their innermost bracket pairs pass by pass (at most
    `limit` passes), long ones take the running bracket count (numpy). Unbalanced text is left
    to the parser to name."""
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _STRING.sub("", text).encode("utf-8", "surrogatepass").translate(_SQUARE, _OTHERS)
    if b"[" * (limit + 1) in brackets:
        return True
    if len(brackets) > 200_000:
        return bracket_depth(brackets)[0] > limit
    for _ in range(limit):
        reduced = brackets.replace(b"[]", b"")
        if reduced == brackets:
            return False
        brackets = reduced
    return b"[]" in brackets


def bracket_depth(brackets: bytes, start: int = 0) -> tuple[int, int]:
    """(deepest, final) running count of a string of `[` and `]` only, from `start` open."""
    import numpy as np

    steps = np.frombuffer(brackets.translate(_STEP), dtype=np.int8).astype(np.int64)
    if not len(steps):
        return start, start
    running = np.cumsum(steps) + start
    return int(max(start, running.max())), int(running[-1])


_BYTES_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"')


def file_too_deep(path: Path, limit: int = MAX_JSON_DEPTH, block: int = 8 << 20) -> bool:
    """`too_deep` for a JSON or JSONL file of any size, read in blocks that end at a newline
    (a JSON string holds no raw newline, so each block's strings are whole)."""
    depth, carry = 0, b""
    with open(path, "rb") as f:
        while True:
            data = f.read(block)
            buf = carry + data
            cut = buf.rfind(b"\n") + 1 if data else len(buf)
            if data and not cut:
                carry = buf
                continue
            part, carry = buf[:cut], buf[cut:]
            brackets = _BYTES_STRING.sub(b"", part).translate(_SQUARE, _OTHERS)
            deepest, depth = bracket_depth(brackets, depth)
            if deepest > limit:
                return True
            if not data:
                return False


_STEP = bytes.maketrans(b"[]", b"\x01\xff")


def loads(text: str, where: str) -> Any:
    """`json.loads` with the nesting bound; UsageError naming `where` for text that is not JSON."""
    if too_deep(text):
        raise UsageError(f"{where}: not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}: not valid JSON ({e.msg}, line {e.lineno})") from None
    except RecursionError:
        raise UsageError(f"{where}: not valid JSON (nested too deeply)") from None


def read_objects(path: Path, what: str = "file") -> Iterator[tuple[int, dict]]:
    """Yield `(line number, object)` for each non-blank line of a JSONL file.

    A missing file, a line that is not JSON, or a line that is not a JSON object is a
    UsageError naming the file and line (`PATH:LINE: ...`).
    """
    path = check_not_special(path, what)
    if not path.is_file():
        raise UsageError(f"{what} not found: {path}")
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        if too_deep(line):
            raise UsageError(f"{path}:{lineno}: not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels)")
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
    UTF-8 or cannot be read (or is a FIFO or device). `opener` may be `gzip.open`."""
    check_not_special(path, "input file")
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
    path = check_not_special(path, "input file")
    if not path.is_file():
        raise UsageError(missing)
    try:
        text = path.read_text(encoding="utf-8")
        if too_deep(text):
            raise UsageError(f"{path}: not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels)")
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: not valid JSON ({str(exc)[:80] or 'nested too deeply'})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return doc
