"""Reading JSON and JSONL input files with one clear error per bad file or line.

One guarded reader for every file a user hands over (questions of every suite, `hf:` and
SPEED-Bench data files, templates, training data, run folders, baselines): before any parser sees
a byte, the path must be a regular file (a FIFO or device is refused by type, never opened), of
at most `MAX_INPUT_BYTES` (a 1 GB question file ran for minutes before anything was said), and
UTF-8 text where it is text (the line is named). Nesting is bounded before any parser sees the
text (`too_deep`): a JSON value nested deeper than `MAX_JSON_DEPTH` levels is refused by name
instead of reaching a recursive parser (the JSON reader under `datasets` died with a segmentation
fault on 100,000 levels). `read_text` applies the guards to a file specbench parses itself,
`check_data_file` to one another library will read.
"""

from __future__ import annotations

import codecs
import json
import re
import zlib
from pathlib import Path
from typing import Any, Iterator, Optional

from specbench_cli.errors import UsageError, check_not_special

MAX_JSON_DEPTH = 100  # arrays/objects inside each other; real question, run and config files use < 10
MAX_INPUT_BYTES = 512 << 20  # one input file; SPEED-Bench's largest split (32k-token prompts) is about 250 MB
MAX_CONFIG_BYTES = 16 << 20  # one model or heads config.json; published ones are a few KB
NEWLINE = b"\n"
TEXT_KINDS = {".json": "json", ".jsonl": "json", ".csv": "text"}  # data files: what the guards read them as
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
    for lineno, line in enumerate(read_lines(path, what=what), 1):
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


def read_lines(path: Path, opener=open, what: str = "input file") -> list[str]:
    """The lines of a UTF-8 text file read through `read_text` (its guards, one UsageError naming
    the file and line). `opener` may be `gzip.open`: the size bound then holds for the
    decompressed text too."""
    # "\n" only: str.splitlines also splits at U+2028, U+0085, \x1c-\x1e, \v and \f, which JSON
    # strings may hold unescaped, and a line would be cut in two
    lines = read_text(path, what, opener=opener).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def guard(path: str | Path, what: str, max_bytes: Optional[int] = None) -> Path:
    """The checks every input file passes before it is opened: not a special file (by `stat`),
    present and a file, at most `max_bytes` (default `MAX_INPUT_BYTES`). Returns the path."""
    max_bytes = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    path = check_not_special(path, what)
    if not path.is_file():
        raise UsageError(f"{what} not found: {path}")
    size = path.stat().st_size
    if size > max_bytes:
        raise UsageError(f"{what} {path}: {size:,} bytes, more than the {_mb(max_bytes)} an input file may hold "
                         f"(split it, or take a slice)")
    return path


def _mb(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n} bytes"


def read_text(path: str | Path, what: str = "input file", max_bytes: Optional[int] = None, opener=open) -> str:
    """A guarded file's text: `guard`, then at most `max_bytes` read (of the decompressed text when
    `opener` decompresses) and decoded as UTF-8; a UsageError naming the file (and line) otherwise."""
    data = read_bytes(path, what, max_bytes, opener)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(NEWLINE) + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None


def read_bytes(path: str | Path, what: str = "input file", max_bytes: Optional[int] = None, opener=open) -> bytes:
    """`read_text` before decoding: `guard`, then at most `max_bytes` read."""
    max_bytes = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    path = guard(path, what, max_bytes)
    try:
        with opener(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:  # gzip raises the last two for a damaged .gz
        raise UsageError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if len(data) > max_bytes:
        raise UsageError(f"{what} {path}: more than {_mb(max_bytes)} of text once decompressed")
    return data


def check_data_file(path: str | Path, what: str, max_bytes: Optional[int] = None) -> Path:
    """The guards for a file another library parses (`datasets`, pyarrow): `guard`, then for a
    text kind (`TEXT_KINDS`, by suffix) UTF-8 throughout and, for JSON and JSONL, the nesting
    bound, both read in blocks (nothing is held whole). Binary kinds (Parquet, Arrow) are bounded
    by size alone. Returns the path."""
    path = guard(path, what, max_bytes)
    kind = TEXT_KINDS.get(path.suffix)
    if kind is None:
        return path
    decoder, line = codecs.getincrementaldecoder("utf-8")(), 1
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                raise UsageError(f"{path}:{line + block[:exc.start].count(NEWLINE)}: not UTF-8 text") from None
            line += block.count(NEWLINE)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise UsageError(f"{path}:{line}: not UTF-8 text (the file ends inside a character)") from None
    if kind == "json" and file_too_deep(path):
        raise UsageError(f"{what} {path} nests JSON deeper than {MAX_JSON_DEPTH} levels")
    return path


def read_json(path: str | Path, what: str = "input file", max_bytes: Optional[int] = None) -> Any:
    """A JSON file's value through every guard: `read_text` (a regular file, at most `max_bytes`,
    default `MAX_CONFIG_BYTES`; UTF-8) and `loads` (the nesting bound); UsageError naming the file."""
    return loads(read_text(path, what, MAX_CONFIG_BYTES if max_bytes is None else max_bytes), str(path))


def read_json_object(path: Path, missing: str) -> dict:
    """Parse a JSON file that must hold one object; `missing` is the message for an absent file."""
    path = check_not_special(path, "input file")
    if not path.is_file():
        raise UsageError(missing)
    try:
        text = read_bytes(path).decode("utf-8")
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
