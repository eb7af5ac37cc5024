"""The backends of a load run (store/load.py's `Backend`): a server that answers many requests at
once, reached over HTTP (`HttpBackend`), or specbench's own loop serving arrivals
(`load/own_loop.py`, imported only when a run has one of its methods).

`HttpBackend` serves one engine method (`ENGINE:METHOD`, servers/): its server is started by
specbench with `slots` requests decoded at once (llama-server `-np`, vLLM `--max-num-seqs`, the
run's highest concurrency; each point gets a fresh server, so nothing an n-gram table or a prefix
cache learnt at one point helps the next), or is the `--engine-url` server the user gave (then
nothing is started and its state carries over). Requests are streamed (load/http.py) from one
thread each (load/schedule.py), only to that server.

Per request: its times and tokens from the stream, and what the engine says of its speculation:
llama.cpp's reply counts draft and accepted tokens (`timings.draft_n`, `draft_n_accepted`) for
every request at any load; at concurrency 1 (one request in flight, nothing else on the server)
the difference of `/metrics` around it adds the drafts, the accepted length of each step (as
`specbench run` derives them: servers/engine_method.py) and the per-position counts
(`acceptance_source` "metrics-delta"). An OpenAI-compatible server's reply reports no
speculation, so its requests have counts only at concurrency 1, from its `/metrics`.

A request that fails (a timeout, a dropped connection, garbage in the stream, a dead server, a
counter that cannot be) is an error record with the server's last log lines where specbench
started it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from specbench_cli.load.http import Completion, StreamError, complete_llama, complete_openai
from specbench_cli.load.schedule import Cancel, error_record, serve_trace
from specbench_cli.names import is_baseline
from specbench_cli.servers.engine_method import (
    Counters,
    EngineMethod,
    check_counters,
    counter_deltas,
    steps_from_counters,
)
from specbench_cli.servers.server import EngineError
from specbench_cli.store.load import LoadPoint, RequestRecord, TraceRequest


class HttpBackend:
    """One engine method's server under load (module doc)."""

    def __init__(self, label: str, method: EngineMethod, run_dir: Optional[Path], slots: int,
                 slot_ctx: Optional[int] = None, vocab_size: Optional[int] = None,
                 max_in_flight: Optional[int] = None) -> None:
        self.label, self.method, self.run_dir = label, method, run_dir
        self.slots, self.max_in_flight = max(1, int(slots)), max_in_flight
        self.vocab = vocab_size
        self.cancel = Cancel()
        method.settings.slots = self.slots
        method.settings.slot_ctx = slot_ctx
        if vocab_size:
            method.settings.vocab_size = vocab_size
        self.api = "llama" if method.engine == "llama.cpp" else "openai"
        self.model = ""

    # -- Backend ------------------------------------------------------------------------------
    def start(self) -> None:
        self.method.ensure_ready(self.run_dir)     # a server of our own (none with --engine-url)
        if self.api == "openai":
            self.model = self.method.served()

    def serve(self, point: LoadPoint, trace: Sequence[TraceRequest],
              record: Callable[[RequestRecord], None]) -> None:
        alone = point.mode == "concurrency" and int(point.level) == 1
        serve_trace(point, trace, lambda req, clock0: self.one(req, clock0, alone), record, self.slots,
                    self.max_in_flight, self.cancel)

    def stop(self) -> None:
        self.cancel.set()
        self.method.close()

    # -- one request --------------------------------------------------------------------------
    def tail(self) -> Optional[str]:
        server = self.method.server
        return server.tail(8) if server is not None else None

    def failed(self, req: TraceRequest, why: str, send_s: Optional[float]) -> RequestRecord:
        note = self.method.died_note() if self.method.server is not None else ""
        return error_record(req, f"{self.label}: {why}{note}", send_s, self.tail())

    def one(self, req: TraceRequest, clock0: float, with_metrics: bool) -> RequestRecord:
        url, timeout = self.method.url, self.method.settings.timeout
        before = after = None
        try:
            before = self.method.metrics() if with_metrics else None
        except EngineError:
            before = None
        started = time.perf_counter() - clock0
        try:
            if self.api == "llama":
                got = complete_llama(url, list(req.prompt_ids), req.max_new_tokens, timeout, clock0, self.vocab)
            else:
                got = complete_openai(url, self.model, list(req.prompt_ids), req.max_new_tokens, timeout, clock0,
                                      self.vocab, vllm=self.method.engine == "vllm")
        except StreamError as e:
            return self.failed(req, str(e), started)
        try:
            if before is not None:
                after = self.method.metrics()
            return self.record_of(req, got, before, after)
        except EngineError as e:
            return self.failed(req, str(e), got.send_s)

    def record_of(self, req: TraceRequest, got: Completion, before: Optional[dict],
                  after: Optional[dict]) -> RequestRecord:
        rec = RequestRecord(index=req.index, question_id=req.question_id, category=req.category, turn=req.turn,
                            send_s=got.send_s, first_token_s=got.first_token_s, end_s=got.end_s,
                            token_times_s=got.token_times, streamed=got.token_times is not None,
                            prompt_tokens=len(req.prompt_ids), new_tokens=got.new_tokens, output_ids=got.output_ids)
        rec.extra = {"api": "llama.cpp /completion" if self.api == "llama" else "openai /v1/completions"}
        if got.finish:
            rec.extra["finish"] = got.finish
        if got.output_ids is None:
            rec.extra["ids"] = (f"incomplete: {got.missing_ids} token id(s) not in the stream" if got.missing_ids
                                else "the server streams text, not token ids")
        if got.token_times is None:
            rec.extra["token_times"] = f"unknown: tokens counted from {got.tokens_from}"
        t = got.timings
        if t:
            rec.extra["timings"] = t
            if "draft_n_accepted" in t and t["draft_n_accepted"] > t.get("draft_n", 0):
                raise EngineError(f"timings.draft_n_accepted {t['draft_n_accepted']} exceeds timings.draft_n "
                                  f"{t.get('draft_n', 0)}")
            rec.drafted, rec.accepted = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
            rec.acceptance_source = "reply"
        if before is not None and after is not None:
            self.add_counters(rec, counter_deltas(before, after, self.method.metrics_prefix, self.method.max_draft()))
        return rec

    def add_counters(self, rec: RequestRecord, counters: Counters) -> None:
        """The request's /metrics counters (one request in flight) as its steps, `run`'s way."""
        generated, longest = rec.new_tokens, self.method.max_draft()
        if rec.drafted is not None and rec.accepted is not None:   # the reply's exact totals replace /metrics'
            counters = check_counters(counters, generated, longest)
            slack = {k: v for k, v in counters.slack.items() if k not in ("draft_tokens", "accepted")}
            counters = Counters(counters.drafts, rec.drafted, rec.accepted, counters.per_pos, slack, "timings")
        counters = check_counters(counters, generated, longest)
        accept_lengths, _, _ = steps_from_counters(generated, counters)
        rec.steps, rec.accept_lengths = len(accept_lengths), accept_lengths
        rec.drafted, rec.accepted = counters.draft_tokens, counters.accepted
        rec.accepted_by_position = list(counters.per_pos)
        rec.extra["drafts"] = counters.drafts
        rec.acceptance_source = "metrics-delta"


def make_backend(cfg: Any, inst: Any, planned: Any, loaded: Any, run_dir: Path, slots: int,
                 slot_ctx: Optional[int] = None, vocab_size: Optional[int] = None,
                 max_in_flight: Optional[int] = None):
    """The backend of method instance `inst` at one point: `planned` is its method planned at the
    point's block complexity (run/plan.py); `cfg` the run's config at that point; `loaded` the
    target (`models.load.LoadedModel`) for specbench's own loop (None for engine-only runs)."""
    if inst.engine is not None:
        return HttpBackend(inst.label, planned, run_dir, slots, slot_ctx, vocab_size, max_in_flight)
    from specbench_cli.load.own_loop import OwnLoopBackend

    return OwnLoopBackend(cfg, inst, loaded)


def is_speculative(label: str, name: str) -> bool:
    """Whether a method speculates: every one but a baseline (`ar`, `ENGINE:ar`)."""
    return not is_baseline(name)
