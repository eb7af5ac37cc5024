"""One writer per folder: SWEEP/sweep.lock (and RUN/run.lock, see runfolder.py) holds the
owner's host and pid.

Created with O_EXCL, so two writers starting at once cannot both win. A lock whose pid is dead on
this host is stale (a process killed with -9) and is taken over with a note; a live one, or one
written on another host (whose pid we cannot check), refuses the second writer with exit 2.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Callable, Optional

from specbench_cli.errors import UsageError

LOCK = "sweep.lock"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class FolderLock:
    """`with FolderLock(folder, "run.lock", "run"):` holds FOLDER/run.lock, or exits 2 naming the holder."""

    def __init__(self, folder: Path, name: str, what: str, note: Callable[[str], None] = lambda msg: None) -> None:
        self.path = Path(folder) / name
        self.what = what
        self.note = note
        self.held = False

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}, f)
        return True

    def _holder(self) -> Optional[dict]:
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def acquire(self) -> "FolderLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a lost race on a stale lock is retried, then treated as busy
            if self._create():
                self.held = True
                return self
            holder = self._holder()
            if holder is None:
                continue
            pid, host = holder.get("pid"), holder.get("host")
            if host == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid):
                self.note(f"taking over a stale lock {self.path} (pid {pid} is no longer running)")
                self.path.unlink(missing_ok=True)
                continue
            where = f" on {host}" if host and host != socket.gethostname() else ""
            raise UsageError(f"{self.path.parent} is in use by another {self.what} (pid {pid}{where}); "
                             f"wait for it, or delete {self.path} if that process is gone")
        raise UsageError(f"{self.path.parent} is in use by another {self.what} (could not take {self.path})")

    def release(self) -> None:
        if self.held and (self._holder() or {}).get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class SweepLock(FolderLock):
    """SWEEP/sweep.lock: one sweep per folder."""

    def __init__(self, sweep_dir: Path, note: Callable[[str], None] = lambda msg: None) -> None:
        super().__init__(sweep_dir, LOCK, "sweep", note)
