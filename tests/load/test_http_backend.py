"""The load generator's HTTP side against fake servers (tests/load/fake_stream_server.py): streamed
replies become per-request records (token times, ids, the reply's speculation counts, /metrics
deltas at concurrency 1), and every fault (a stall, a dropped connection, garbage in the stream, a
server that dies) is an error record, never a hang; a dead server's record carries its log's
last lines. Closed and open loop send what the trace says."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_stream_server import serve  # noqa: E402

from specbench_cli.load.backends import HttpBackend  # noqa: E402
from specbench_cli.load.http import StreamError, complete_llama, complete_openai  # noqa: E402
from specbench_cli.methods.core.method import MethodContext  # noqa: E402
from specbench_cli.servers import registry as engine_methods  # noqa: E402
from specbench_cli.servers.engine_method import EngineSettings  # noqa: E402
from specbench_cli.store.load import LoadPoint, TraceRequest  # noqa: E402

FAKE = Path(__file__).with_name("fake_stream_server.py")
VOCAB = 1000


def requests(n: int, cap: int = 6, rate: float | None = None, warm: int = 0) -> list[TraceRequest]:
    out = [TraceRequest(-(k + 1), "w", "c", 0, (5, 6, 7), 2, None) for k in range(warm)]
    return out + [TraceRequest(i, f"q{i}", "c", 0, (10 + i, 11 + i, 12 + i), cap,
                               None if rate is None else i / rate) for i in range(n)]


def engine(name: str, url: str | None = None, timeout: float = 5.0):
    """A planned engine method: on `url` (someone else's server), or (None) with the settings a
    test gives a binary of its own."""
    m = engine_methods.get(name)(MethodContext(budget=4))
    m.settings = EngineSettings(model="model.gguf", url=url, timeout=timeout, threads=1)
    return m


def fake_binary(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    exe.chmod(0o755)
    return exe


def run(backend: HttpBackend, point: LoadPoint, trace) -> list:
    got = []
    backend.start()
    try:
        backend.serve(point, trace, got.append)
    finally:
        backend.stop()
    return sorted(got, key=lambda r: r.index)


@pytest.fixture
def server():
    url, srv = serve("ok")
    yield url, srv
    srv.shutdown()


# ----------------------------------------------------------------------------- one request


def test_a_llama_stream_gives_times_ids_and_the_replys_counts(server):
    url, _ = server
    got = complete_llama(url, [1, 2, 3], 5, 5.0, time.perf_counter(), VOCAB)
    assert got.output_ids == [3, 2, 1, 3, 2] and got.new_tokens == 5
    assert got.first_token_s == got.token_times[0] <= got.token_times[-1] <= got.end_s
    assert got.token_times == sorted(got.token_times) and len(got.token_times) == 5
    assert got.timings["draft_n"] == 2 and got.timings["draft_n_accepted"] == 1 and got.finish == "limit"


def test_a_token_held_back_by_the_server_counts_but_its_id_is_missing(server):
    url, srv = server
    srv.mode = "noids"
    got = complete_llama(url, [1, 2, 3], 4, 5.0, time.perf_counter(), VOCAB)
    assert got.new_tokens == 4 and got.missing_ids == 1 and got.output_ids is None
    assert len(got.token_times) == 4 and got.token_times[0] == got.token_times[1]   # it came with the next


def test_an_openai_stream_with_ids_and_one_with_text_only(server):
    url, srv = server
    got = complete_openai(url, "fake", [1, 2, 3], 4, 5.0, time.perf_counter(), VOCAB, vllm=True)
    assert got.output_ids == [3, 2, 1, 3] and got.new_tokens == 4 and len(got.token_times) == 4
    assert got.usage["completion_tokens"] == 4
    srv.mode = "textonly"
    got = complete_openai(url, "fake", [1, 2, 3], 4, 5.0, time.perf_counter(), VOCAB)
    assert got.output_ids is None and got.token_times is None and got.new_tokens == 4   # counted by usage
    assert got.tokens_from == "usage" and got.first_token_s is not None


def test_ids_outside_the_vocabulary_and_tokens_past_the_cap_are_refused(server):
    url, _ = server
    with pytest.raises(StreamError, match="outside the vocabulary"):
        complete_llama(url, [1, 2, 5000], 3, 5.0, time.perf_counter(), VOCAB)


@pytest.mark.parametrize("mode, words", [("stall", "no complete answer within 1 s"),
                                         ("drop", "ended before its last event|connection failed"),
                                         ("garbage", "garbage in the stream")])
def test_each_fault_is_an_error_record_and_nothing_hangs(server, mode, words):
    url, srv = server
    srv.mode = mode
    backend = HttpBackend("llama.cpp:ar", engine("llama.cpp:ar", url, timeout=1.0), None, slots=2, vocab_size=VOCAB)
    t0 = time.monotonic()
    recs = run(backend, LoadPoint("concurrency", 2, 3, 60.0), requests(3))
    assert time.monotonic() - t0 < 20
    assert [r.index for r in recs] == [0, 1, 2]
    assert all(r.error and re.search(words, r.error) for r in recs), [r.error for r in recs]


def test_closed_loop_records_speculation_from_the_reply_and_metrics_deltas_at_concurrency_1(server):
    url, _ = server
    backend = HttpBackend("llama.cpp:ngram-mod", engine("llama.cpp:ngram-mod", url), None, slots=4, vocab_size=VOCAB)
    recs = run(backend, LoadPoint("concurrency", 1, 3, 60.0, warmup=2), requests(3, warm=2))
    assert [r.index for r in recs] == [0, 1, 2]                         # warm-up not recorded
    assert all(r.error is None and r.new_tokens == 6 and r.output_ids for r in recs)
    assert all(r.acceptance_source == "metrics-delta" and r.drafted == 2 and r.accepted == 1 for r in recs)
    assert all(r.accepted_by_position == [1] and r.steps == 4 and sum(r.accept_lengths) == 5 for r in recs)
    recs = run(backend, LoadPoint("concurrency", 3, 3, 60.0), requests(3))
    assert all(r.acceptance_source == "reply" and r.steps is None and r.drafted == 2 for r in recs)


def test_open_loop_sends_at_the_traces_times_and_stops_at_the_time_limit(server):
    url, _ = server
    backend = HttpBackend("llama.cpp:ar", engine("llama.cpp:ar", url), None, slots=2, vocab_size=VOCAB)
    trace = requests(6, rate=4.0)          # 0, 0.25, ..., 1.25 s
    recs = run(backend, LoadPoint("rate", 4.0, 6, 0.9), trace)
    assert [r.index for r in recs] == [0, 1, 2, 3]                      # 1.0 s and later: not sent
    for r in recs:
        assert trace[r.index].send_s <= r.send_s < trace[r.index].send_s + 0.2


def test_max_concurrency_holds_requests_back_and_says_so():
    url, srv = serve("ok", delay=0.1)
    try:
        backend = HttpBackend("llama.cpp:ar", engine("llama.cpp:ar", url), None, slots=1, vocab_size=VOCAB,
                              max_in_flight=1)
        recs = run(backend, LoadPoint("rate", 100.0, 3, 30.0), requests(3, rate=100.0))
    finally:
        srv.shutdown()
    spans = sorted((r.send_s, r.end_s) for r in recs)
    assert all(a[1] <= b[0] + 0.01 for a, b in zip(spans, spans[1:]))   # one at a time
    assert any("scheduled_s" in r.extra for r in recs)


def test_a_server_that_dies_gives_error_records_with_its_last_log_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STREAM_MODE", "die")
    monkeypatch.setenv("FAKE_STREAM_AT", "2")
    m = engine("llama.cpp:ar")
    m.binary, m.gguf = str(fake_binary(tmp_path)), "model.gguf"
    backend = HttpBackend("llama.cpp:ar", m, tmp_path, slots=1, vocab_size=VOCAB)
    recs = run(backend, LoadPoint("concurrency", 1, 3, 60.0), requests(3))
    assert recs[0].error is None
    assert all(r.error and "fatal: the fake server broke down" in (r.log_tail or "") for r in recs[1:])
    assert "fatal: the fake server broke down" in recs[1].error     # the died note
    assert m.server is None                                         # stopped
