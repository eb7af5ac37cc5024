"""Keyed JSON caches: measurements made once per machine and reused (the cost curve's t(q),
run/auto/cost.py; the lean forward's kernel plan, targets/hf/kernel_plan.py).

A document lives at `<cache>/<folder>/<digest of its key>.json` and holds its own `key`: the
dictionary of everything that changes the numbers. Both caches go through `KeyedJsonCache`, so
what is promised holds for each:

- read defensively: a missing file is a miss; anything else that is not a regular UTF-8 JSON
  object of at most `MAX_BYTES`, nested at most `MAX_JSON_DEPTH` levels, free of NaN and
  Infinity, holding this key, and accepted by the cache's own `parse` (which checks every field
  the caller will use) is invalid: one warning line names the file and why, and the caller
  measures again (the new document replaces the old one). Nothing in a damaged file can crash
  a later run; a link at the name is read as invalid, never followed;
- written atomically (atomic.py: a fresh temporary file, renamed over the name, which replaces
  a planted link instead of writing through it);
- a cache folder that cannot be written (read-only, full, not a folder) is one warning line per
  process, and the run goes on with the measurement it made, uncached.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable, Generic, Optional, TypeVar

from specbench_cli.atomic import atomic_write
from specbench_cli.jsonl import MAX_JSON_DEPTH, too_deep

T = TypeVar("T")
MAX_BYTES = 16 << 20  # a kernel plan with every candidate's timings is a few KB; a 1024-point curve 60 KB
Say = Callable[[str], None]
_UNWRITABLE: set[Path] = set()  # cache roots already warned about in this process


def warn(line: str) -> None:
    """The default: one yellow `warning:` line on stderr."""
    from rich.markup import escape

    from specbench_cli.console import err

    err.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)


def digest(key: dict[str, Any]) -> str:
    """16 hex digits of the key's canonical JSON: the document's file name."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


class Invalid(ValueError):
    """A cached document that must not be used (the message says why)."""


def _no_constant(name: str) -> Any:
    raise Invalid(f"holds {name}")


def read_document(path: Path) -> Optional[dict]:
    """The JSON object at `path`, None when there is no file; `Invalid` for anything else."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # no file, or no cache folder at all
        return None
    except OSError as exc:
        raise Invalid(f"cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise Invalid("is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise Invalid("is not a regular file")
    if info.st_size > MAX_BYTES:
        raise Invalid(f"is larger than {MAX_BYTES >> 20} MB")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            text = f.read(MAX_BYTES + 1).decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("is not UTF-8 text") from None
    except OSError as exc:
        raise Invalid(f"cannot be read: {exc.strerror or exc}") from None
    if too_deep(text):
        raise Invalid(f"nests JSON deeper than {MAX_JSON_DEPTH} levels")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise Invalid(str(exc) if isinstance(exc, Invalid) else "is not valid JSON") from None
    if not isinstance(doc, dict):
        raise Invalid("does not hold a JSON object")
    return doc


class KeyedJsonCache(Generic[T]):
    """One keyed cache: `folder` under the cache root, `what` names it in messages ("cost curve"),
    `redo` says what happens instead ("measuring it again"), `parse` turns a document into the
    object (raising ValueError, TypeError or KeyError for one it cannot use), `dump` the reverse
    (the dictionary holds `key`)."""

    def __init__(self, folder: str, what: str, redo: str, parse: Callable[[dict], T],
                 dump: Callable[[T], dict]) -> None:
        self.folder, self.what, self.redo, self.parse, self.dump = folder, what, redo, parse, dump

    def path(self, key: dict[str, Any], root: Path) -> Path:
        return Path(root) / self.folder / f"{digest(key)}.json"

    def load(self, key: dict[str, Any], root: Path, say: Optional[Say] = None) -> Optional[T]:
        """The cached object for `key`; None when there is none or it is invalid (then `say`
        hears one line naming the file and why)."""
        path = self.path(key, root)
        try:
            doc = read_document(path)
            if doc is None:
                return None
            if doc.get("key") != key:
                raise Invalid("was made for another key")
            return self.parse(doc)
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            (say or warn)(f"cached {self.what} {path} {_why(exc)}; {self.redo}")
            return None

    def save(self, value: T, root: Path, say: Optional[Say] = None) -> Optional[Path]:
        """Write `value` under its key; None (and one warning per cache root and process) when
        the cache folder cannot be written."""
        doc = self.dump(value)
        path = self.path(doc["key"], root)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return atomic_write(path, json.dumps(doc, indent=1))
        except OSError as exc:
            if Path(root) not in _UNWRITABLE:
                _UNWRITABLE.add(Path(root))
                (say or warn)(f"cannot write the cache under {root} ({exc.strerror or exc}); going on without it "
                    f"(set SPECBENCH_CACHE to a writable folder to keep measurements)")
            return None


def _why(exc: Exception) -> str:
    """'is not valid JSON', or 'is unusable (the parser's first line)'."""
    if isinstance(exc, Invalid):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"is unusable ({text[0][:120] if text else type(exc).__name__})"
