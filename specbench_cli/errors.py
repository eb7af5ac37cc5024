"""One error type per exit code: bad input exits 2, runtime failures exit 1.

Commands raise these; `app.main` turns them into one red line on stderr (a traceback only
with `--debug`).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Iterable


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
