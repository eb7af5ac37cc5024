"""Whole-file writes that never leave a 0-byte or half-written file: the data goes to a temporary
file in the same folder, is flushed to disk, and is renamed over the target (atomic on POSIX and
Windows); on any failure (a full disk, Ctrl-C) the temporary file is removed and the target keeps
its old content, or stays absent.

Links: the temporary file gets a fresh random name and is created exclusively (`O_EXCL`, which
never follows a link), and the rename replaces whatever is at the target, a planted symbolic
link included, instead of writing through it; so a folder from elsewhere holding
`manifest.json -> /some/file` cannot make specbench overwrite that file."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable, Union

Data = Union[str, bytes, Callable[[Path], None]]


def atomic_write(path: Union[str, Path], data: Data, encoding: str = "utf-8") -> Path:
    """Write `data` (text, bytes, or a function that writes the file at the path it is given)
    to `path` atomically; returns `path`."""
    path = Path(path)
    tmp, fd = new_temp(path)
    try:
        with open(tmp, "wb", opener=lambda _path, _flags: fd) as f:  # the file created just now
            if not callable(data):
                f.write(data.encode(encoding) if isinstance(data, str) else data)
        if callable(data):
            data(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def new_temp(path: Path) -> tuple[Path, int]:
    """A new empty file beside `path` (`.NAME.PID.RANDOM.tmp`) and its open descriptor: created
    exclusively, so a link or file already at that name is never opened."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue


def output_problem(path: Union[str, Path], folder: bool) -> Union[str, None]:
    """Why `path` cannot become an output file (folder=False) or folder (folder=True), or None:
    checked before any work starts, so a bad output is not found after a long computation."""
    path = Path(path).expanduser()
    if path.exists():
        if folder and not path.is_dir():
            return f"{path} exists and is not a folder"
        if not folder and path.is_dir():
            return f"{path} is a folder, not a file"
    parent = path if folder and path.exists() else path.parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{path}: {probe} is a file, so nothing can be written under it"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{path}: {probe} is not writable"
    return None
