"""Servers specbench starts (llama.cpp's `llama-server`, vLLM's OpenAI server) and stops on every way out, and the small
HTTP client that talks to any server (started here, or someone else's `--engine-url`).

A started server runs on a free loopback port with its log in a file (the run folder's
`engines/` by default) and is stopped on every exit path:

- normally and on exceptions: `Server.stop()` (the run closes its methods in a `finally`);
- Ctrl-C: the server is in a process group of its own, so the terminal's SIGINT reaches only
  specbench, which unwinds and stops it;
- SIGTERM: while a server runs, SIGTERM (when nothing else handles it) raises SystemExit in
  specbench, so the same unwinding stops it; `atexit` stops whatever is left;
- specbench killed outright (SIGKILL, a crash): the child asked the kernel for SIGKILL when its
  parent dies (`prctl(PR_SET_PDEATHSIG)`, set between fork and exec). The kernel sends it when the
  *thread* that started the server ends, so servers are started from the main thread.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any, Optional, Sequence

from specbench_cli.errors import RuntimeFailure

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 5.0


class EngineError(RuntimeFailure):
    """A server failed: it would not start, died, hung or answered something unusable. Its row
    becomes an error row (the message carries the server's last log lines where there is a log)."""


# ----------------------------------------------------------------------------- HTTP


def request_json(url: str, body: Optional[dict] = None, timeout: float = 60.0) -> Any:
    """GET (body None) or POST JSON to `url`; the parsed reply, or EngineError (HTTP errors with
    the reply's first 300 characters, timeouts, refused connections, replies that are not JSON)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    text = request_text(req, timeout)
    try:
        return json.loads(text)
    except ValueError:
        raise EngineError(f"{url} answered something that is not JSON: {text[:120]!r}") from None


def request_text(req: urllib.request.Request | str, timeout: float) -> str:
    url = req.full_url if isinstance(req, urllib.request.Request) else req
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            return reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:300] if e.fp else ""
        raise EngineError(f"{url}: HTTP {e.code} {detail}".strip()) from None
    except (TimeoutError, socket.timeout):
        raise EngineError(f"{url}: no answer within {timeout:g} s") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, (TimeoutError, socket.timeout)):
            raise EngineError(f"{url}: no answer within {timeout:g} s") from None
        raise EngineError(f"{url}: {e.reason}") from None
    except (ConnectionError, OSError) as e:  # reset / closed mid-reply (the server died)
        raise EngineError(f"{url}: {type(e).__name__}: {e}") from None


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {'name' or 'name{labels}': value} (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            continue
    return out


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    """A loopback port nothing listens on now (the server binds it a moment later)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_setup() -> None:
    """Runs in the child between fork and exec: a process group of its own (the terminal's Ctrl-C
    reaches only specbench, which stops it), and death when its parent dies."""
    os.setpgid(0, 0)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the process group and atexit still apply
        pass


_LIVE: "set[Server]" = set()
_LOCK = threading.Lock()
_HOOKED = False


def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


def _on_sigterm(signum: int, frame: Any) -> None:
    _stop_all()
    raise SystemExit(128 + signum)


def _hook_exits() -> None:
    """atexit for every server; SIGTERM -> SystemExit while nothing else handles it (main thread)."""
    global _HOOKED
    if _HOOKED:
        return
    _HOOKED = True
    atexit.register(_stop_all)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


_CAUSE = re.compile(r"\b[A-Z]\w*(?:Error|Exception): \S.*")
_WRAPPER = re.compile(r"root cause|see (?:the )?(?:stack trace|above)|initialization failed|EngineDeadError", re.I)


class Server:
    """One server process: `argv` plus `--host 127.0.0.1 --port P`, its output in `log`, ready when
    GET `health` answers 200 (within `timeout` seconds)."""

    def __init__(self, argv: Sequence[str], log: Path, health: str = "/health", timeout: float = 120.0,
                 env: Optional[dict[str, str]] = None) -> None:
        self.argv, self.log, self.health, self.timeout = list(argv), Path(log), health, timeout
        self.env = dict(env or {})  # added to this process's environment
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        _hook_exits()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a port taken between free_port() and the server's bind: try another
            self.port = free_port()
            with open(self.log, "ab") as log:
                log.write(f"$ {' '.join(self.argv)} --host 127.0.0.1 --port {self.port}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(self.argv + ["--host", "127.0.0.1", "--port", str(self.port)],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             preexec_fn=_child_setup,
                                             env={**os.environ, **self.env} if self.env else None)
            with _LOCK:
                _LIVE.add(self)
            try:
                self._wait_ready()
                return self
            except EngineError:
                bound = "address already in use" in self.tail(5).lower()
                self.stop()
                if not bound or attempt == 2:
                    raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise EngineError(f"{self.argv[0]} exited with code {self.proc.returncode if self.proc else '?'} "
                                  f"while starting{self.tail_note()}")
            try:
                with urllib.request.urlopen(self.url + self.health, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise EngineError(f"{self.argv[0]} was not ready within {self.timeout:g} s{self.tail_note()}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited(self, within: float = 0.0) -> bool:
        """Whether it has exited (waiting up to `within` seconds for it to)."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(within)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after a grace period; idempotent."""
        proc = self.proc
        with _LOCK:
            _LIVE.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def tail(self, n: int = 8, window: int = 16384) -> str:
        """The last `n` lines of its log, read from its last `window` bytes."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log) - window))
                lines = deque(f.read().decode("utf-8", "replace").splitlines(), maxlen=n)
        except OSError:
            return ""
        return "\n".join(lines)

    def cause(self) -> str:
        """The log's last line that names an exception with a message of its own ('ValueError:
        Available memory ... is less than requested'), skipping wrappers that only point back up
        ('... See root cause above'): servers that fail in a child process (vLLM's engine core)
        log the cause well above their last lines."""
        for line in reversed(self.tail(400, window=1 << 18).splitlines()):
            found = _CAUSE.search(line)
            if found and not _WRAPPER.search(line):
                return found.group(0).strip()
        return ""

    def tail_note(self, n: int = 8) -> str:
        """'; cause: E: msg; last lines of LOG: a | b | c' (one line: an error row keeps an error's
        first line)."""
        tail = " | ".join(line.strip() for line in self.tail(n).splitlines() if line.strip())
        cause = self.cause()
        why = f"; cause: {cause}" if cause and cause not in tail else ""
        return f"{why}; last lines of {self.log.parent.name}/{self.log.name}: {tail}" if tail else why

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
