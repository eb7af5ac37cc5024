"""The folder lock is held by the operating system: exactly one writer wins a race, a killed
holder frees it, and an empty or garbage lock file never blocks."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal

import pytest
from helpers.locks import hold_lock

from specbench_cli.errors import UsageError
from specbench_cli.store.lock import FolderLock

WORKERS, TRIALS = 4, 100


def _racer(root: str, start, attempted, released, results) -> None:
    from pathlib import Path

    for trial in range(TRIALS):
        start.wait()
        lock = FolderLock(Path(root) / f"t{trial}", "run.lock", "run")
        try:
            lock.acquire()
            won = True
        except UsageError:
            won = False
        attempted.wait()  # every racer has tried before the winner lets go
        if won:
            lock.release()
        results.put((trial, won))
        released.wait()


@pytest.mark.skipif(os.name != "posix", reason="fork-based race")
def test_four_racers_one_hundred_times_exactly_one_writer(tmp_path):
    """Each trial starts from the lock file of a killed writer (the case that let two resumers
    both take over a stale lock when the lock was only the file)."""
    import socket
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for trial in range(TRIALS):
        (tmp_path / f"t{trial}").mkdir()
        (tmp_path / f"t{trial}" / "run.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    ctx = mp.get_context("fork")
    start, attempted, released = (ctx.Barrier(WORKERS) for _ in range(3))
    results = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(tmp_path), start, attempted, released, results))
             for _ in range(WORKERS)]
    for p in procs:
        p.start()
    wins = [0] * TRIALS
    for _ in range(WORKERS * TRIALS):
        trial, won = results.get(timeout=60)
        wins[trial] += won
    for p in procs:
        p.join(timeout=30)
    assert wins == [1] * TRIALS


@pytest.mark.parametrize("content", [b"", b"\x00garbage\xff", b'{"pid": 1, "host": "elsewhere"}', b"[]"])
def test_a_lock_file_nobody_holds_never_blocks(tmp_path, content):
    (tmp_path / "run.lock").write_bytes(content)
    with FolderLock(tmp_path, "run.lock", "run"):
        assert json.loads((tmp_path / "run.lock").read_text())["pid"] == os.getpid()
    assert not (tmp_path / "run.lock").exists()


def test_a_killed_holder_frees_the_lock(tmp_path):
    holder = hold_lock(tmp_path, "run.lock")
    with pytest.raises(UsageError, match=f"pid {holder.pid}"):
        FolderLock(tmp_path, "run.lock", "run").acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    notes = []
    with FolderLock(tmp_path, "run.lock", "run", notes.append):
        pass
    assert any("stale lock" in n and str(holder.pid) in n for n in notes)
