"""One error type per exit code: bad input exits 2, runtime failures exit 1.

Commands raise these; `app.main` turns them into one red line on stderr (a traceback only
with `--debug`).
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from pathlib import Path
from typing import Iterable, Optional


class SpecBenchError(Exception):
    """A failure the user should see as one line."""

    exit_code = 1


class UsageError(SpecBenchError):
    """Bad input: unknown name, missing or malformed file, out-of-range option."""

    exit_code = 2


class RuntimeFailure(SpecBenchError):
    """Something went wrong while running (model load, generation, I/O)."""

    exit_code = 1


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' Did you mean 'x'?' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" Did you mean '{close[0]}'?" if close else ""


def unknown(kind: str, name: str, choices: Iterable[str]) -> UsageError:
    choices = sorted(choices)
    return UsageError(f"unknown {kind} '{name}'.{did_you_mean(name, choices)} Known: {', '.join(choices)}")


def check_output_folder(path: str | Path, option: str) -> Path:
    """A folder that can be written into (it, or its nearest existing ancestor, is a writable
    folder); UsageError naming `option` otherwise. Creates nothing: it runs before any work,
    so bad input costs no model load and a refused run leaves no folder behind."""
    folder = Path(path).expanduser()
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        if probe == folder:
            raise UsageError(f"{option} {folder} is a file, not a folder")
        raise UsageError(f"{option} {folder}: cannot create it ({probe} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {folder} is not writable" if probe == folder else
                         f"{option} {folder}: cannot create it ({probe} is not writable)")
    return folder


def check_output_file(path: str | Path, option: str) -> Path:
    """A file to (over)write: not a folder, and its folder exists or can be made and is writable."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise UsageError(f"{option} {file} is a folder; give a file path")
    if file.exists() and not os.access(file, os.W_OK):
        raise UsageError(f"{option} {file} is not writable")
    check_output_folder(file.parent, option)
    return file


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: str | Path) -> Optional[str]:
    """'a FIFO (named pipe)', 'a character device', ... when `path` (links followed) is a special
    file; None for a regular file, a folder or a missing path. Decided by `stat`, never by opening."""
    try:
        mode = os.stat(Path(path).expanduser()).st_mode
    except OSError:
        return None
    return next((name for test, name in _SPECIAL if test(mode)), None)


def check_not_special(path: str | Path, what: str) -> Path:
    """UsageError when `path` is a special file: reading a FIFO blocks until a writer comes, a
    device can be endless. Checked by type before the file is opened."""
    if kind := special_kind(path):
        raise UsageError(f"{what} {Path(path).expanduser()} is {kind}, not a regular file")
    return Path(path).expanduser()


def check_input_file(path: str | Path, what: str) -> Path:
    """An existing regular file to read; UsageError naming `what` for a missing path, a folder,
    or a special file (refused by type, before opening)."""
    file = check_not_special(path, what)
    if not file.exists():
        raise UsageError(f"{what} not found: {file}")
    if file.is_dir():
        raise UsageError(f"{what} {file} is a folder, not a file")
    return file


def link_refused(path: str | Path) -> UsageError:
    """The one line for a symbolic link where specbench writes a file of its own: a run folder or
    cache from elsewhere may plant `run.lock -> /some/file`, and writing through it would
    overwrite a file outside the folder."""
    return UsageError(f"{path} is a symbolic link; specbench never writes through a link it did not create "
                      f"(remove the link)")


def check_not_link(path: str | Path) -> Path:
    """`path` unless it is a symbolic link (decided by `lstat`, nothing is opened or followed)."""
    if Path(path).is_symlink():
        raise link_refused(path)
    return Path(path)


def open_no_link(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` that never follows a link at the last component (`O_NOFOLLOW`); a link there is
    `link_refused`, however it got there (checked again by the kernel at the open itself)."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (Path(path).is_symlink() and exc.errno in (errno.EEXIST, errno.EMLINK)):
            raise link_refused(path) from None
        raise
