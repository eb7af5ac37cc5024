"""One writer per folder: SWEEP/sweep.lock (and RUN/run.lock, see runfolder.py).

The lock is held by the operating system: an exclusive advisory lock (`flock`; `msvcrt.locking`
on Windows) on the open lock file, kept for the writer's lifetime and released by the kernel when
the process ends, however it ends. So a stale lock cannot exist, and of any number of writers
starting at once exactly one wins. The file's content (the holder's pid and host) only names the
holder in the message the others get; an empty or unreadable file never blocks anyone. After
locking, the holder checks that the path still names the file it locked (a releasing holder
deletes it), and starts again if not.

The lock file is never a link or a special file: a folder from elsewhere holding
`run.lock -> /some/file` (or a FIFO, whose reading blocks) is refused in one line, and the file is
opened with `O_NOFOLLOW`, so the holder's pid is never written through a link.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Callable, Optional

from specbench_cli.errors import UsageError, check_not_link, check_not_special, open_no_link

LOCK = "sweep.lock"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _try_lock(fd: int) -> bool:
    """Take the exclusive lock on `fd` without waiting; False when another process holds it."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):
        return False
    return True


class FolderLock:
    """`with FolderLock(folder, "run.lock", "run"):` holds FOLDER/run.lock, or exits 2 naming the holder."""

    def __init__(self, folder: Path, name: str, what: str, note: Callable[[str], None] = lambda msg: None) -> None:
        self.path = Path(folder) / name
        self.what = what
        self.note = note
        self.held = False
        self.fd: Optional[int] = None

    def _holder(self) -> dict:
        """The pid/host the lock file names ({} when it is empty, unreadable, gone, or not a short
        JSON object: only its first 4 KB are read, never through a link, never blocking)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            try:
                doc = json.loads(os.read(fd, 4096).decode("utf-8"))
            finally:
                os.close(fd)
        except (OSError, ValueError, RecursionError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def acquire(self) -> "FolderLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(20):  # a holder that deletes the file between our open and our lock: start again
            check_not_special(check_not_link(self.path), "lock file")
            before = self._holder()
            fd = open_no_link(self.path, os.O_RDWR | os.O_CREAT)
            if not _try_lock(fd):
                os.close(fd)
                pid, host = before.get("pid") or self._holder().get("pid"), before.get("host")
                where = f" on {host}" if host and host != socket.gethostname() else ""
                raise UsageError(f"{self.path.parent} is in use by another {self.what} "
                                 f"(pid {pid if pid is not None else 'unknown'}{where}); wait for it to finish")
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            pid = before.get("pid")
            if isinstance(pid, int) and pid != os.getpid() and before.get("host") == socket.gethostname() \
                    and not pid_alive(pid):
                self.note(f"taking over a stale lock {self.path} (pid {pid} is no longer running)")
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode())
            os.fsync(fd)
            self.fd, self.held = fd, True
            return self
        raise UsageError(f"{self.path.parent} is in use by another {self.what} (could not take {self.path})")

    def release(self) -> None:
        if self.held and self.fd is not None:
            try:
                self.path.unlink(missing_ok=True)  # while still holding the lock: see the module docstring
            finally:
                os.close(self.fd)  # the kernel releases the lock with the last descriptor
        self.fd, self.held = None, False

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class SweepLock(FolderLock):
    """SWEEP/sweep.lock: one sweep per folder."""

    def __init__(self, sweep_dir: Path, note: Callable[[str], None] = lambda msg: None) -> None:
        super().__init__(sweep_dir, LOCK, "sweep", note)
