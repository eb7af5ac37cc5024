"""A real lock holder: another process that takes a folder's lock (the OS lock, as a writer
does) and keeps it until killed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HOLD = """
import sys, time
from pathlib import Path
from specbench_cli.store.lock import FolderLock
lock = FolderLock(Path(sys.argv[1]), sys.argv[2], "holder").acquire()
print("locked", flush=True)
time.sleep(120)
"""


def hold_lock(folder: Path, name: str) -> subprocess.Popen:
    """Start a process holding FOLDER/NAME; returns once it holds it (kill it to release)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), name], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    line = proc.stdout.readline()
    if line.strip() != "locked" or time.time() > deadline:
        proc.kill()
        raise RuntimeError(f"the lock holder did not start: {line!r}")
    return proc
