"""Run one sweep job: `python -m specbench_cli run ...` into SWEEP/jobs/<job id>/.

A job folder holds at most one run folder (made by `run --output-dir`), `job.json` (its
settings and arguments), `job.log` (the run's output, every attempt appended) and
`attempts.jsonl` (one line per attempt start and end: host, pids, exit code, seconds).

State comes only from what `run` writes: a run folder whose manifest has a non-null `finished`
is done; one without is half-done and continues with `run --resume`, which skips every row
already in samples.jsonl (rows are appended one by one, so a killed job loses only the question
it was on). This module runs both in the sweep process (local) and inside Ray workers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import open_no_link
from specbench_cli.run.resume import command_line_only_args

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"


def read_json(path: Path) -> Optional[dict]:
    """A JSON object from a file, or None if it is missing or unreadable."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _complete_json_lines(path: Path) -> list[dict]:
    """The JSON lines of `path` that parse (a torn last line is skipped); [] if it is missing."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def rows(run_dir: Path) -> list[dict]:
    """Complete rows of a run folder's samples.jsonl (a torn last line is skipped)."""
    return _complete_json_lines(run_dir / SAMPLES)


def job_state(job_dir: Path) -> tuple[str, Optional[Path]]:
    """('new', None), ('partial', run folder) or ('finished', run folder)."""
    runs = sorted(p for p in job_dir.glob("*/") if (p / MANIFEST).is_file()) if job_dir.is_dir() else []
    for run in runs:
        if (read_json(run / MANIFEST) or {}).get("finished"):
            return "finished", run
    if runs:  # several half-done folders only if someone ran into this folder by hand: keep the fullest
        return "partial", max(runs, key=lambda r: len(rows(r)))
    return "new", None


def _log_attempt(job_dir: Path, record: dict) -> None:
    with _append(job_dir / "attempts.jsonl") as f:
        f.write(json.dumps(record) + "\n")


def _append(path: Path):
    """`path` opened for appending text, never through a planted link (exit 2 naming it)."""
    return os.fdopen(open_no_link(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8")


def attempts(job_dir: Path) -> list[dict]:
    """The attempt records of a job (start and end lines)."""
    return _complete_json_lines(job_dir / "attempts.jsonl")


RUNNING: set = set()          # `run` subprocesses of this process, stopped on Ctrl-C
STOPPING = threading.Event()  # set on Ctrl-C: no new attempt starts


def stop_all() -> None:
    """Ctrl-C in a local sweep: interrupt every running job (each keeps its finished rows)."""
    STOPPING.set()
    for proc in list(RUNNING):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the parent dies (Linux), so a killed Ray worker leaves no
    orphan `run` appending to the folder that the retry is about to resume."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def run_job(job: dict, sweep_dir: str, attempt: int = 0) -> dict:
    """Run (or resume, or skip) one job; return {id, status, rc, run, seconds, error, errors, host}.

    `job` is {"id", "settings", "args"}. status: 'finished' (run folder complete), 'failed'
    (worth a retry: crash, kill, exit 1 before the end) or 'usage' (exit 2: bad input, no retry).
    """
    host = socket.gethostname()
    result = {"id": job["id"], "host": host, "attempt": attempt, "rc": None, "run": None, "seconds": 0.0,
              "error": "", "errors": 0, "skipped": False}
    if not Path(sweep_dir).is_dir():
        return {**result, "status": "usage",
                "error": f"sweep folder {sweep_dir} is not visible on {host}: it must be on a filesystem every node shares"}
    job_dir = Path(sweep_dir) / "jobs" / job["id"]
    job_dir.mkdir(parents=True, exist_ok=True)
    if not (job_dir / "job.json").is_file():
        atomic_write(job_dir / "job.json", json.dumps({k: job[k] for k in ("id", "settings", "args")}, indent=2) + "\n")
    state, run = job_state(job_dir)
    if state == "finished":
        return {**result, "status": "finished", "run": str(run), "skipped": True, "errors": _error_rows(run)}
    if state == "partial":
        args = ["run", "--resume", str(run), "--no-report", *command_line_only_args(job["args"])]
        _drop_foreign_run_lock(run, job_dir, host)
    else:
        args = [*job["args"], "--output-dir", str(job_dir), "--no-report"]
    if STOPPING.is_set():
        return {**result, "status": "failed", "error": "interrupted"}
    log = job_dir / "job.log"
    started = time.time()
    with _append(log) as out:
        out.write(f"--- attempt {attempt} on {host}: specbench {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen([sys.executable, "-m", "specbench_cli", *args], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                                env={**os.environ, "COLUMNS": "200"})
        _log_attempt(job_dir, {"event": "start", "attempt": attempt, "host": host, "pid": os.getpid(),
                               "child_pid": proc.pid, "resume": state == "partial", "time": started})
        RUNNING.add(proc)
        try:
            rc = proc.wait()
        finally:
            RUNNING.discard(proc)
    seconds = time.time() - started
    _log_attempt(job_dir, {"event": "end", "attempt": attempt, "host": host, "rc": rc, "seconds": seconds})
    state, run = job_state(job_dir)
    result.update(rc=rc, seconds=seconds, run=str(run) if run else None)
    if state == "finished":
        return {**result, "status": "finished", "errors": _error_rows(run)}
    return {**result, "status": "usage" if rc == 2 else "failed", "error": _last_line(log) or f"exit code {rc}"}


def _drop_foreign_run_lock(run: Path, job_dir: Path, host: str) -> None:
    """A run.lock written on another node is left by an attempt that died with its node (this
    sweep holds sweep.lock, and retries a job only after its attempt ended); `run` cannot check a
    remote pid and would refuse the retry with exit 2, so remove it and say so in job.log. A
    lock of this host is left to `run` itself, which takes it over when its pid is dead."""
    lock = run / "run.lock"
    if lock.is_symlink() or not lock.is_file():  # a planted link is `run --resume`'s to refuse
        return
    try:
        holder = json.loads(lock.read_text(encoding="utf-8")[:4096])
    except (OSError, ValueError, RecursionError):
        return
    if isinstance(holder, dict) and holder.get("host") not in (None, host):
        lock.unlink(missing_ok=True)
        with _append(job_dir / "job.log") as out:
            out.write(f"note: removed {lock} left by pid {holder.get('pid')} on {holder.get('host')} "
                      f"(that attempt ended)\n")


def _error_rows(run: Path) -> int:
    return sum(1 for r in rows(run) if r.get("status") != "ok")


def measured_seconds(job_dir: Path) -> Optional[float]:
    """Wall seconds a finished job took over all its attempts, or None if not finished."""
    if job_state(job_dir)[0] != "finished":
        return None
    return sum(a.get("seconds", 0.0) for a in attempts(job_dir) if a.get("event") == "end")
