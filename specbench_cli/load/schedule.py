"""Sending a trace at a point's load: one thread per request in flight (the standard library only).

- Warm-up requests (negative indexes) go first, before the point's clock starts, at most
  `slots` at a time; their answers are dropped.
- Closed loop (`concurrency`): `level` workers, each sending the next request of the trace as
  soon as its previous one ended, until the trace is used up or the time limit has passed.
- Open loop (`rate`): each request is sent at its `send_s` on the point's clock, in a thread of
  its own (at most `max_in_flight` at once when given: a request whose time comes while that
  many are in flight waits for one to end, and records when it was really sent); nothing is sent
  at or after the time limit.

`send(request, clock0)` must not raise (a backend turns every failure into an error record; a
bug that escapes becomes one here too) and ends within its timeout, so the point always ends.
Records go to `record` one at a time, in the order requests end. `Cancel.set()` (Ctrl-C in the
main thread) stops sending; records that end after it are dropped.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator, Optional, Sequence

from specbench_cli.store.load import LoadPoint, RequestRecord, TraceRequest

Send = Callable[[TraceRequest, float], RequestRecord]
JOIN_POLL_S = 0.2   # the main thread joins in slices, so Ctrl-C reaches it at once


def error_record(req: TraceRequest, message: str, send_s: Optional[float] = None,
                 log_tail: Optional[str] = None) -> RequestRecord:
    """The error row of `req` (a one-line message)."""
    line = " ".join(str(message).split())[:2000] or "failed"
    return RequestRecord(index=req.index, question_id=req.question_id, category=req.category, turn=req.turn,
                         send_s=send_s, prompt_tokens=len(req.prompt_ids), error=line, log_tail=log_tail,
                         streamed=False, token_times_s=None)


def _safe(send: Send, req: TraceRequest, clock0: float) -> RequestRecord:
    try:
        return send(req, clock0)
    except Exception as e:  # noqa: BLE001 - a request never takes the point down with it
        return error_record(req, f"{type(e).__name__}: {e}", time.perf_counter() - clock0)


def _join(threads: Sequence[threading.Thread]) -> None:
    for t in threads:
        while t.is_alive():
            t.join(JOIN_POLL_S)


def _closed(requests: Sequence[TraceRequest], workers: int, send: Send, keep: Callable[[RequestRecord], None],
            clock0: float, limit_s: Optional[float], cancel: threading.Event) -> None:
    todo: Iterator[TraceRequest] = iter(requests)
    lock = threading.Lock()

    def worker() -> None:
        while not cancel.is_set():
            with lock:
                if limit_s is not None and time.perf_counter() - clock0 >= limit_s:
                    return
                req = next(todo, None)
            if req is None:
                return
            keep(_safe(send, req, clock0))

    threads = [threading.Thread(target=worker, name=f"specbench-load-{i}", daemon=True)
               for i in range(max(1, workers))]
    for t in threads:
        t.start()
    _join(threads)


def _open(requests: Sequence[TraceRequest], send: Send, keep: Callable[[RequestRecord], None], clock0: float,
          limit_s: float, cancel: threading.Event, max_in_flight: Optional[int]) -> None:
    room = threading.BoundedSemaphore(max_in_flight) if max_in_flight else None
    threads: list[threading.Thread] = []

    def one(req: TraceRequest) -> None:
        try:
            rec = _safe(send, req, clock0)
            if req.send_s is not None and rec.send_s is not None and rec.send_s > req.send_s + 0.001:
                rec.extra["scheduled_s"] = req.send_s   # it waited for room (--max-concurrency) or a busy sender
            keep(rec)
        finally:
            if room is not None:
                room.release()

    for req in requests:
        at = clock0 + float(req.send_s or 0.0)
        while not cancel.is_set() and time.perf_counter() < at:
            time.sleep(min(0.05, max(0.0, at - time.perf_counter())))
        if cancel.is_set() or time.perf_counter() - clock0 >= limit_s:
            break
        if room is not None:
            while not room.acquire(timeout=JOIN_POLL_S):
                if cancel.is_set():
                    break
            if cancel.is_set() or time.perf_counter() - clock0 >= limit_s:
                room.release()
                break
        t = threading.Thread(target=one, args=(req,), name=f"specbench-load-r{req.index}", daemon=True)
        threads.append(t)
        t.start()
        threads = [x for x in threads if x.is_alive()] if len(threads) > 256 else threads
    _join(threads)


class Cancel(threading.Event):
    """Set to stop sending (Ctrl-C); what ends afterwards is not recorded."""


def serve_trace(point: LoadPoint, trace: Sequence[TraceRequest], send: Send,
                record: Callable[[RequestRecord], None], slots: int = 1, max_in_flight: Optional[int] = None,
                cancel: Optional[Cancel] = None) -> None:
    """Serve `trace` at `point`'s load (module doc); returns when every request sent has ended.
    Warm-up requests run first with at most `slots` in flight. Each record is handed to
    `record` under one lock (the caller's writer need not be thread-safe)."""
    cancel = cancel if cancel is not None else Cancel()
    lock = threading.Lock()

    def keep(rec: RequestRecord) -> None:
        with lock:
            if not cancel.is_set():
                record(rec)

    warm = [t for t in trace if t.index < 0]
    measured = [t for t in trace if t.index >= 0]
    if warm:
        t0 = time.perf_counter()
        _closed(warm, min(max(1, slots), len(warm)), send, lambda rec: None, t0, None, cancel)
    if cancel.is_set():
        return
    clock0 = time.perf_counter()
    if point.mode == "concurrency":
        _closed(measured, int(point.level), send, keep, clock0, point.time_limit_s, cancel)
    else:
        _open(measured, send, keep, clock0, point.time_limit_s, cancel, max_in_flight)

