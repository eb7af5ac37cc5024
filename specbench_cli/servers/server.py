"""Servers specbench starts (llama.cpp's `llama-server`, vLLM's OpenAI server) and stops on every way out, and the small
HTTP client that talks to any server (started here, or someone else's `--engine-url`).

A started server runs on a free loopback port with its log in a file (the run folder's
`servers/` by default, opened without following links: `open_log`) and is stopped on every
exit path:

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
import errno
import http.client
import ipaddress
import json
import os
import re
import signal
import socket
import stat
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
PROBE_S = 2.0              # one readiness probe's whole exchange, at most (within the start's timeout)
PROBE_BYTES = 64 << 10     # what a readiness probe's answer may hold


class EngineError(RuntimeFailure):
    """A server failed: it would not start, died, hung or answered something unusable. Its row
    becomes an error row (the message carries the server's last log lines where there is a log)."""


class ReplyTooLarge(EngineError):
    """A reply past its byte cap (refused, never read whole)."""


# ----------------------------------------------------------------------------- HTTP

# What one reply may hold, read in pieces and refused past the cap (never read whole): /metrics,
# /v1/models and an error's text by default; a completion's cap follows its tokens (reply_cap).
MAX_REPLY_BYTES = 8 << 20
_PIECE = 1 << 16


def reply_cap(tokens: int) -> int:
    """The byte cap of a completion reply about `tokens` tokens (prompt and answer): 1 KiB a token
    holds an id, its text escaped, logprobs and offsets many times over; 2 MiB more for the rest."""
    return (2 << 20) + 1024 * max(0, int(tokens))


class _Deadline:
    """One request's wall-clock deadline: connect, headers and the whole body. A socket timeout
    bounds each read only (a server sending a byte a second never trips it), so at the deadline
    a timer shuts the request's sockets down; the blocked read returns and the request fails."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.expired = self.done = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return self.end - time.monotonic()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def finish(self) -> None:
        """Before its sockets close: the timer must not touch them afterwards."""
        with self._lock:
            self.done = True
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # socket.socket's own: an SSL socket's would drop its state under a read
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _resolve(host: str, port: int, deadline: _Deadline) -> list:
    """getaddrinfo(host, port) within the time `deadline` has left. A name lookup blocks in the
    resolver, which no socket shutdown reaches, so it runs in a worker thread that is abandoned
    when the deadline passes first (it ends when the resolver gives up); an IP literal (the
    servers specbench starts) needs no lookup and no thread."""
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    found: list = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except OSError as e:
            found.append(e)

    worker = threading.Thread(target=lookup, name=f"specbench-lookup-{host[:40]}", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline.left()))
    if not found:
        raise TimeoutError(f"looking up {host[:80]} took past the deadline")
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


def _connect(address: tuple, timeout: Any, source_address: Any, deadline: _Deadline) -> socket.socket:
    """socket.create_connection's work (each address of the host in turn) with the lookup and
    each connect bounded by the time `deadline` has left."""
    host, port = address
    failed: Optional[OSError] = None
    for family, kind, proto, _, where in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            left = deadline.left()
            if left <= 0:
                raise TimeoutError("the deadline passed")
            sock.settimeout(min(timeout, left) if isinstance(timeout, (int, float)) else left)
            if source_address:
                sock.bind(source_address)
            sock.connect(where)
            return sock
        except OSError as e:
            failed = e
            sock.close()
    raise failed or OSError(f"{host[:80]}: no address to connect to")


def _watched(connection: type, deadline: _Deadline) -> type:
    """`connection` (http.client's HTTP(S)Connection) whose sockets `deadline` watches, the name
    lookup and each connect bounded by the time left."""
    class Watched(connection):  # type: ignore[misc, valid-type]
        def connect(self) -> None:
            left = deadline.left()
            if left <= 0:
                raise TimeoutError("the deadline passed")
            self.timeout = min(self.timeout, left) if isinstance(self.timeout, (int, float)) else left
            self._create_connection = lambda address, timeout, source=None: _connect(address, timeout, source,
                                                                                     deadline)
            super().connect()
            deadline.watch(self.sock)
    return Watched


class _UnderDeadline:
    """A urllib handler whose connections are watched by `deadline` (mixed into HTTP and HTTPS)."""

    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kw):  # type: ignore[override]
        return super().do_open(_watched(http_class, self.deadline), req, **kw)


class _HTTP(_UnderDeadline, urllib.request.HTTPHandler):
    pass


class _HTTPS(_UnderDeadline, urllib.request.HTTPSHandler):
    pass


def request_json(url: str, body: Optional[dict] = None, timeout: float = 60.0,
                 max_bytes: int = MAX_REPLY_BYTES) -> Any:
    """GET (body None) or POST JSON to `url`; the parsed reply, or EngineError (HTTP errors with
    the reply's first 300 characters, no whole reply within `timeout` seconds, a reply past
    `max_bytes`, refused connections, replies that are not JSON)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    text = request_text(req, timeout, max_bytes)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: arrays nested past the parser's depth
        raise EngineError(f"{url} answered something that is not JSON: {text[:120]!r}") from None


def request_text(req: urllib.request.Request | str, timeout: float, max_bytes: int = MAX_REPLY_BYTES,
                 bound: str = "--engine-timeout") -> str:
    """The reply to `req` as text, within `timeout` seconds of wall-clock time for the whole
    exchange (the host name's lookup, connect, headers, body) and at most `max_bytes` bytes; else
    EngineError (a late reply's names `bound`, what set the timeout)."""
    url = req.full_url if isinstance(req, urllib.request.Request) else req
    late = EngineError(f"{url}: no answer within {timeout:g} s (the whole reply; {bound})")
    deadline = _Deadline(timeout)
    try:
        opener = urllib.request.build_opener(_HTTP(deadline), _HTTPS(deadline))
        with opener.open(req, timeout=timeout) as reply:
            body = _read_capped(reply, url, max_bytes)
            deadline.finish()
        if deadline.expired:  # the shut socket ended the body early
            raise late
        return body.decode("utf-8", "replace")
    except EngineError:
        raise
    except urllib.error.HTTPError as e:
        detail = ""
        if e.fp and not deadline.expired:
            with contextlib.suppress(Exception):
                detail = " ".join(e.read(1200).decode("utf-8", "replace").split())[:300]   # one line
        deadline.finish()
        with contextlib.suppress(Exception):
            e.close()
        if deadline.expired:
            raise late from None
        raise EngineError(f"{url}: HTTP {e.code} {detail}".strip()) from None
    except Exception as e:  # noqa: BLE001 - a read the deadline cut short fails many ways (OSError, IncompleteRead)
        deadline.finish()
        if deadline.expired or isinstance(e, (TimeoutError, socket.timeout)) or (
                isinstance(e, urllib.error.URLError) and isinstance(e.reason, (TimeoutError, socket.timeout))):
            raise late from None
        if isinstance(e, urllib.error.URLError):
            raise EngineError(f"{url}: {e.reason}") from None
        if isinstance(e, (OSError, http.client.HTTPException)):  # reset / closed mid-reply (the server died)
            raise EngineError(f"{url}: {type(e).__name__}: {e}") from None
        raise
    finally:
        deadline.finish()


def _read_capped(reply: Any, url: str, max_bytes: int) -> bytes:
    """The body of `reply`, read in pieces; EngineError past `max_bytes` (a Content-Length over
    it is refused before any of it is read) or when the connection closed before the end."""
    too_big = ReplyTooLarge(f"{url}: the reply is larger than {max_bytes:,} bytes; refused")
    declared = (reply.headers.get("Content-Length") or "").strip()
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_big
    pieces, size = [], 0
    while True:
        piece = reply.read(min(_PIECE, max_bytes + 1 - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        if size > max_bytes:
            raise too_big
    missing = getattr(reply, "length", None)
    if isinstance(missing, int) and missing > 0:
        raise EngineError(f"{url}: the connection closed {missing:,} bytes before the end of the reply")
    return b"".join(pieces)


class Metrics(dict):
    """{'name' or 'name{labels}': value} of a /metrics page, and `bounds`: {the same keys: how far
    the value as printed may be from the server's own (printed_bound)}, for the keys where it
    is not exact."""

    def __init__(self) -> None:
        super().__init__()
        self.bounds: dict[str, int] = {}


def parse_metrics(text: str, prefix: str = "") -> Metrics:
    """Prometheus text -> Metrics (comments skipped; with `prefix`, only the series whose name
    starts with it). Values as written: the caller checks them."""
    out = Metrics()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or not line.startswith(prefix):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            continue
        bound = printed_bound(value)
        if bound:
            out.bounds[name.strip()] = bound
    return out


# A number in exponent form: llama-server prints its counters as C++ doubles (`<<`, like printf's
# %g: 6 significant digits, trailing zeros dropped), so 1234567 reads `1.23457e+06`.
_EXPONENT_FORM = re.compile(r"[+-]?([0-9]+)(?:\.([0-9]*))?[eE]([+-]?[0-9]{1,4})")
PRINTED_DIGITS = 6


def printed_bound(text: str) -> int:
    """How far a whole number printed as `text` may be from the value it was printed from: 0 for
    one printed in full (`1234567`, `1234567.0`: Python's and Go's exporters), else half a unit
    of its last digit at 6 significant digits or as many as it shows, whichever is more
    (`1.23457e+06`: 5; `1e+06`, which %g printed from anything in 999,995..1,000,005: 5)."""
    found = _EXPONENT_FORM.fullmatch(text.strip())
    if not found:
        return 0
    whole, fraction, exponent = found.group(1).lstrip("0"), found.group(2) or "", int(found.group(3))
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    top = exponent + len(whole) - 1 if whole else exponent - (len(fraction) - len(fraction.lstrip("0"))) - 1
    last = top - max(PRINTED_DIGITS, len(digits)) + 1   # the power of ten of its last digit
    return 5 * 10 ** (min(last, 40) - 1) if last > 0 else 0


# ----------------------------------------------------------------------------- processes

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_log(path: Path) -> int:
    """`path` open for appending (a descriptor; created when missing, its folder too), never
    through a link: the folder is opened with O_NOFOLLOW and the file relative to it with
    O_NOFOLLOW, and only a regular file is kept (a FIFO would block the server's output). A run
    folder from elsewhere may plant `servers/NAME.log -> /some/file` (or `engines -> /elsewhere`):
    the server's output would change that file, so a link or a special file there is an
    EngineError naming it (`--resume` refuses one before any model loads: run/resume.py)."""
    refused = EngineError(f"{path} is a symbolic link or not a plain file; specbench never writes an engine log "
                          f"through a link it did not create (remove it)")
    folder = Path(path).parent
    with contextlib.suppress(FileExistsError):  # a dangling link there: refused just below
        folder.mkdir(parents=True, exist_ok=True)
    try:
        where = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if folder.is_symlink() or e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise EngineError(f"{folder} is a symbolic link or not a folder; specbench never writes an engine log "
                              f"through a link it did not create (remove it)") from None
        raise EngineError(f"{folder}: cannot open the engine log folder ({e.strerror})") from None
    try:
        fd = os.open(Path(path).name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=where)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR) or os.path.islink(path):  # ENXIO: a FIFO, no reader
            raise refused from None
        raise EngineError(f"{path}: cannot open the engine log ({e.strerror})") from None
    finally:
        os.close(where)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise refused
    os.set_blocking(fd, True)
    return fd


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
        for attempt in range(3):  # a port taken between free_port() and the server's bind: try another
            self.port = free_port()
            with os.fdopen(open_log(self.log), "ab") as log:
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
        """Probe `health` until it answers (any 2xx), each probe through the deadline client
        (request_text) with PROBE_S of wall-clock time at most, and never past the start's own
        `timeout`: a server that accepts the connection and drips its answer cannot hold the
        start past it. EngineError (its log's last lines, the last probe's failure) otherwise."""
        deadline = time.monotonic() + self.timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise EngineError(f"{self.argv[0]} exited with code {self.proc.returncode if self.proc else '?'} "
                                  f"while starting{self.tail_note()}")
            probe = max(0.05, min(PROBE_S, deadline - time.monotonic()))
            try:
                request_text(self.url + self.health, probe, PROBE_BYTES, bound="one readiness probe")
                return
            except (EngineError, OSError, ValueError) as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise EngineError(f"{self.argv[0]} was not ready within {self.timeout:g} s (the last {self.health} "
                                  f"probe: {last[:300]}){self.tail_note()}")
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
        try:  # never through a link planted after the log was opened (its target is no log of ours)
            with open(self.log, "rb", opener=lambda path, flags: os.open(path, flags | NOFOLLOW | os.O_NONBLOCK)) as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - window))
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
