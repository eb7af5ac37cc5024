"""Whole-file writes that never leave a 0-byte or half-written file: the data goes to a temporary
file in the same folder, is flushed to disk, and is renamed over the target (atomic on POSIX and
Windows); on any failure (a full disk, Ctrl-C) the temporary file is removed and the target keeps
its old content, or stays absent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Union

Data = Union[str, bytes, Callable[[Path], None]]


def atomic_write(path: Union[str, Path], data: Data, encoding: str = "utf-8") -> Path:
    """Write `data` (text, bytes, or a function that writes the file at the path it is given)
    to `path` atomically; returns `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if callable(data):
            data(tmp)
        else:
            with open(tmp, "wb") as f:
                f.write(data.encode(encoding) if isinstance(data, str) else data)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
