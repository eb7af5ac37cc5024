"""One error type per exit code: bad input exits 2, runtime failures exit 1.

Commands raise these; `app.main` turns them into one red line on stderr (a traceback only
with `--debug`).
"""

from __future__ import annotations

import difflib
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
