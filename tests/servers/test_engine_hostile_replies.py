"""Engine replies that would hang a run, exhaust its memory or poison its rows (hostile_server.py):
a server dripping one byte at a time, a huge body, a huge /metrics, counters no request could
produce (1e15 draft tokens, 3e7 drafts, position "30000000", NaN, a counter going down),
timings that are not counts or times (draft_n 1e12, prompt_ms NaN or -5000). Each one is an
EngineError naming the value (that question's error row), within the request's deadline and
with bounded memory: nothing is read whole, no list or loop is sized by a counter before it is
checked. The run-level test shows the rows: error rows with one clear message, the good rows
kept, the run folder readable by `report`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest
from hostile_server import HostileServer  # tests/servers is on the path (pytest's rootdir-less import)

from specbench_cli.methods.core.method import MethodContext
from specbench_cli.servers import registry as engine_methods
from specbench_cli.servers.engine_method import EngineSettings, check_counters, counter_deltas
from specbench_cli.servers.server import EngineError, parse_metrics, printed_bound, request_json, request_text

EOS = 2
HANG_GUARD_S = 30   # a hang guard, not a speed test: the old client took minutes (or forever) here
MEMORY_MB = 48      # what one refused request may allocate at its peak (the old client: the whole reply)


def engine(url: str, name: str = "llama.cpp:ngram-mod", timeout: float = 10.0, budget: int = 4,
           started: bool = False):
    """Engine method `name` on the server at `url`: by --engine-url, or (`started`) as if specbench
    had started it with the method's own configuration (its draft length bounds the counters)."""
    m = engine_methods.get(name)(MethodContext(budget=budget))
    m.configure(EngineSettings(model="model.gguf", url=url, timeout=timeout, threads=1, vocab_size=1000))
    if started:
        m.settings.url = None
        m.server = SimpleNamespace(url=url, alive=lambda: True, exited=lambda within=0.0: False, stop=lambda: None)
    return m


def refused(m, match: str, max_new: int = 8) -> tuple[str, float, float]:
    """m.generate on a 3-token prompt must raise EngineError matching `match`: (its message, the
    seconds it took, the peak MB Python allocated meanwhile)."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(EngineError, match=match) as info:
            m.generate([5, 6, 7], max_new, {EOS})
        return str(info.value), time.monotonic() - start, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def one_clear_line(message: str) -> None:
    assert "\n" not in message and "internal error" not in message.lower()
    for crash in ("cannot convert", "OverflowError", "KeyError", "ValueError", "MemoryError", "Traceback"):
        assert crash not in message


# ----------------------------------------------------------------------------- the HTTP client


@pytest.mark.parametrize("what", ["completion", "metrics"])
def test_a_server_dripping_a_byte_at_a_time_is_cut_at_the_engine_timeout(what):
    """0.3 s between bytes never trips a per-read socket timeout of 2 s; the reply (~200 bytes)
    would take a minute. --engine-timeout 2 bounds the whole exchange: an error row after ~2 s."""
    with HostileServer(drip=0.3) as server:
        if what == "completion":
            message, took, _ = refused(engine(server.url, timeout=2.0), r"no answer within 2 s")
        else:  # the same client reads /metrics, /v1/models and any URL
            start = time.monotonic()
            with pytest.raises(EngineError, match=r"no answer within 2 s") as info:
                request_json(server.url + "/completion", {"prompt": [5, 6, 7], "n_predict": 8}, 2.0)
            message, took = str(info.value), time.monotonic() - start
        one_clear_line(message)
        assert took < HANG_GUARD_S
        assert server.sent < 60   # it stopped listening at the deadline, not at the end of the reply


@pytest.mark.parametrize("declared", [256 << 20, None], ids=["content-length", "until-close"])
def test_a_huge_reply_is_refused_at_its_cap_without_reading_it_whole(declared):
    """256 MiB of body (a Content-Length saying so, or none and a body that ends when the
    connection does): refused at the completion's cap (2 MiB + 1 KiB a token), never read whole."""
    with HostileServer(flood=256 << 20, declared=declared) as server:
        message, took, peak = refused(engine(server.url), r"larger than [0-9,]+ bytes; refused")
        one_clear_line(message)
        assert took < HANG_GUARD_S and peak < MEMORY_MB, peak
        assert server.sent < 64 << 20   # the client stopped reading long before the end


def test_a_huge_metrics_page_is_refused():
    """/metrics of 3 million lines (120 MB) is past its 8 MiB cap: an error row, not a silent
    fallback to the reply's timings and not 120 MB in memory."""
    with HostileServer(metrics_lines=3_000_000) as server:
        message, took, peak = refused(engine(server.url), r"/metrics: the reply is larger than")
        one_clear_line(message)
        assert took < HANG_GUARD_S and peak < MEMORY_MB, peak


def test_json_nested_past_the_parsers_depth_is_not_json():
    with HostileServer(reply=lambda body: b"[" * 200_000) as server:
        message, _, _ = refused(engine(server.url), "answered something that is not JSON")
        one_clear_line(message)


def test_a_connection_closed_mid_body_is_named():
    """A Content-Length the body never reaches (the server closed after 1000 of 5000 bytes)."""
    with HostileServer(flood=1000, declared=5000) as server:
        message, _, _ = refused(engine(server.url), "the connection closed 4,000 bytes before the end of the reply")
        one_clear_line(message)


def test_the_deadline_covers_connect_headers_and_body_and_leaves_nothing_behind():
    """A good server answers through the same client; its timer is cancelled (no thread left)."""
    import threading

    with HostileServer() as server:
        before = threading.active_count()
        for _ in range(20):
            assert request_text(server.url + "/health", 5.0) == '{"status":"ok"}'
        time.sleep(0.2)
        assert threading.active_count() <= before + 1   # the server's own handler threads come and go


# ----------------------------------------------------------------------------- counters from /metrics


@pytest.mark.parametrize("counts, positions, match", [
    ({"draft_tokens": 1e15}, None, r"1000000000000000 draft tokens in 2 drafts \(at most 1024 a draft, and one"),
    ({"drafts": 3e7, "draft_tokens": 9e7}, None, r"30000000 drafts for an answer of 8 tokens"),
    ({}, {"0": 1, "30000000": 1}, r"counted 1 acceptances, but position 30000000 is not one of a draft of at most "
                                  r"1024 tokens"),
    ({}, {"0": 1, "abc": 1}, r"position 'abc' is not a draft position"),
    ({}, {"0": 1, "-1": 1}, r"position '-1' is not a draft position"),
    ({"drafts": float("nan")}, None, r"spec_decode_num_drafts_total is nan, not a count"),
    ({"accepted": float("inf")}, None, r"num_accepted_tokens_total is inf, not a count"),
    ({"draft_tokens": 2.5}, None, r"is 2.5, not a count"),
    ({"drafts": -5}, None, r"num_drafts_total went down during the request|is -5, not a count"),
    ({"accepted": 7}, None, r"7 accepted tokens of 6 drafted"),
    ({"drafts": 1e300}, None, r"past any count"),
    ({}, {"0": 5}, r"5 acceptances at one draft position in 2 drafts"),
], ids=["draft_tokens_1e15", "drafts_3e7", "position_30000000", "position_abc", "position_negative", "nan", "inf",
        "fraction", "negative", "accepted_over_drafted", "drafts_1e300", "position_over_drafts"])
def test_counters_no_request_could_produce_are_an_error_row(counts, positions, match):
    """Checked before any list or loop is sized by them: 1e15 draft tokens spun the CPU for
    minutes, position 30000000 wrote a 30-million-entry list into the row."""
    with HostileServer(counts=counts, positions=positions) as server:
        message, took, peak = refused(engine(server.url), match)
        one_clear_line(message)
        assert message.startswith("llama.cpp:ngram-mod: ")   # which method's row
        assert took < HANG_GUARD_S and peak < MEMORY_MB, peak


@pytest.mark.parametrize("counts, positions, match", [
    ({"draft_tokens": 10}, None, r"10 draft tokens in 2 drafts \(at most 3 a draft, and one more draft unverified"),
    ({}, {"0": 1, "3": 1}, r"position 3 is not one of a draft of at most 3 tokens \(0 to 2\)"),
], ids=["draft_tokens", "position"])
def test_a_server_specbench_configured_is_bound_by_the_methods_draft_length(counts, positions, match):
    """BC 4: specbench starts the server with drafts of 3 tokens, so 10 tokens in 2 drafts (and
    one unverified) or an acceptance at a 4th position cannot be; a server by --engine-url
    (configured elsewhere) may draft up to 1024."""
    with HostileServer(counts=counts, positions=positions) as server:
        m = engine(server.url, started=True)
        assert m.max_draft() == 3
        one_clear_line(refused(m, match)[0])
        by_url = engine(server.url)
        assert by_url.max_draft() == 1024
        assert by_url.generate([5, 6, 7], 8, {EOS}).output_ids == [7] * 8
        with_args = engine(server.url, started=True)
        with_args.opts.args = "--spec-draft-n-max 8"   # extra arguments may set another draft length
        assert with_args.max_draft() == 1024


def test_positions_listed_past_the_longest_draft_that_count_nothing_are_ignored():
    """llama-server lists every position of its own longest draft, most of them 0; one listed
    past specbench's bound (even "30000000") that counted nothing this request is no error and
    sizes nothing."""
    with HostileServer(positions={"0": 1, "1": 1, "7": 0, "30000000": 0}) as server:
        g = engine(server.url, started=True).generate([5, 6, 7], 8, {EOS})
        assert g.stats["spec_decode_num_accepted_tokens_per_pos"] == [1, 1]


def test_vllm_counters_are_checked_the_same_way():
    with HostileServer(counts={"drafts": 3e7}) as server:
        message, took, peak = refused(engine(server.url, "vllm:ngram"), r"30000000 drafts for an answer")
        one_clear_line(message)
        assert took < HANG_GUARD_S and peak < MEMORY_MB


# ----------------------------------------------------------------------------- timings from the reply


@pytest.mark.parametrize("timings, no_metrics, match", [
    ({"draft_n": 1e12}, True, r"timings.draft_n is 1000000000000 for an answer of 8 tokens \(at most \(8 \+ 1\) x"),
    ({"draft_n": float("nan")}, True, r"timings.draft_n is nan, not a count"),
    ({"draft_n": 6, "draft_n_accepted": 9}, True, r"9 accepted tokens of 6 drafted"),
    ({"prompt_ms": float("nan")}, False, r"timings.prompt_ms is nan, not a time"),
    ({"prompt_ms": -5000}, False, r"timings.prompt_ms is -5000, not a time"),
    ({"prompt_ms": 1e300}, False, r"timings.prompt_ms is 1e\+300 ms, longer than the request took"),
    ({"predicted_ms": float("inf")}, False, r"timings.predicted_ms is inf, not a time"),
    ({"prompt_ms": "soon"}, False, r"timings.prompt_ms is 'soon', not a time"),
    ({"prompt_n": -1}, False, r"timings.prompt_n is -1, not a count"),
    ({"predicted_n": 1e12}, False, r"8 tokens returned but 1000000000000 counted"),
    ({"predicted_n": True}, False, r"timings.predicted_n is True, not a count"),
], ids=["draft_n_1e12", "draft_n_nan", "accepted_over_drafted", "prompt_ms_nan", "prompt_ms_negative",
        "prompt_ms_1e300", "predicted_ms_inf", "prompt_ms_string", "prompt_n_negative", "predicted_n_1e12",
        "predicted_n_bool"])
def test_timings_that_are_not_counts_or_times_are_an_error_row(timings, no_metrics, match):
    """draft_n 1e12 grew memory by 75 MB/s; prompt_ms NaN or -5000 became the row's
    prefill_time and made the run folder unreadable."""
    with HostileServer(timings=timings, no_metrics=no_metrics) as server:
        message, took, peak = refused(engine(server.url), match)
        one_clear_line(message)
        assert took < HANG_GUARD_S and peak < MEMORY_MB, peak


def test_good_timings_still_make_the_row():
    with HostileServer(no_metrics=True) as server:
        g = engine(server.url).generate([5, 6, 7], 8, {EOS})
        assert g.stats["counters_from"] == "timings" and g.stats["spec_decode_num_draft_tokens"] == 6
        assert g.prefill_time == pytest.approx(0.0015) and sum(g.accept_lengths) == 7


# ----------------------------------------------------------------------------- vLLM-shaped replies


@pytest.mark.parametrize("reply, match", [
    (lambda body: {"choices": [{"token_ids": [1, 2]}], "usage": [3]}, None),
    (lambda body: {"choices": [{"logprobs": ["token_id:1"]}]}, "no token ids"),
    (lambda body: {"choices": [{"logprobs": {"tokens": ["token_id:" + "9" * 5000]}}]}, "no token ids"),
    (lambda body: {"choices": [{"token_ids": [1, 2]}], "usage": {"completion_tokens": float("nan")}}, None),
], ids=["usage_list", "logprobs_list", "token_id_5000_digits", "usage_nan"])
def test_vllm_replies_of_the_wrong_shape_are_engine_errors_or_answers(reply, match):
    """A `usage` or `logprobs` of the wrong type raised AttributeError (an internal-error row)."""
    with HostileServer(reply=reply) as server:
        m = engine(server.url, "vllm:ngram")
        if match is None:
            assert m.generate([5, 6, 7], 8, {EOS}).output_ids == [1, EOS]
        else:
            one_clear_line(refused(m, match)[0])


@pytest.mark.parametrize("models", [{"data": {"x": 1}}, {"data": [7]}, [1, 2], {"data": []}],
                         ids=["data_mapping", "data_of_numbers", "list", "empty"])
def test_a_vllm_model_listing_of_the_wrong_shape_is_an_engine_error(models):
    """`data` a mapping raised KeyError (an internal-error row)."""
    with HostileServer(models=models) as server:
        one_clear_line(refused(engine(server.url, "vllm:ngram"), "lists no model")[0])


# ----------------------------------------------------------------------------- a whole run


@pytest.mark.slow
def test_hostile_replies_in_a_run_are_error_rows_and_the_folder_stays_readable(tmp_path):
    """A run against a server by --engine-url whose replies turn hostile after the warm-up and
    first question (NaN prompt_ms): those rows are error rows with one clear message, the run
    goes on (exit 1), and `report` reads the folder (a NaN stored as prefill_time made every
    later command exit 2)."""
    out = tmp_path / "runs"
    with HostileServer(timings={"prompt_ms": float("nan")}, hostile_from=3) as server:
        r = subprocess.run([sys.executable, "-m", "specbench_cli", "run", "--methods", "ar,llama.cpp:ar",
                            "--engine-url", f"llama.cpp:ar={server.url}", "--tasks", "mini", "--categories", "qa",
                            "--limit", "2", "--max-new-tokens", "8", "--threads", "1", "--no-report",
                            "--output-dir", str(out)], capture_output=True, text=True, timeout=600,
                           env={**os.environ})
    assert r.returncode == 1, r.stderr[-3000:]
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    engine_rows = [x for x in rows if x["method"] == "llama.cpp:ar"]
    assert [x["status"] for x in engine_rows] == ["ok", "error"]
    assert engine_rows[1]["error"] == "EngineError: llama.cpp:ar: timings.prompt_ms is nan, not a time " \
                                      "(a finite number of ms >= 0)"
    assert all(x["status"] == "ok" for x in rows if x["method"] == "ar")
    report = subprocess.run([sys.executable, "-m", "specbench_cli", "report", str(run)], capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]



# ----------------------------------------------------------------------------- a server's start, a host's lookup

HOSTILE = Path(__file__).with_name("hostile_server.py")


def test_a_server_dripping_its_health_answer_cannot_hold_the_start(tmp_path):
    """A server specbench starts that accepts the readiness probe and sends its 200 a byte every
    0.3 s (never tripping a per-read timeout; the answer would take half a minute and then say
    ready): the start gives up at its own bound (--engine-timeout 3 here) with one clear error,
    the engine-start failure every row of the method gets (a run's warm-up ends the run with it),
    and the server is stopped."""
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir()
    pid_file = tmp_path / "server.pid"
    exe.write_text(f'#!/bin/sh\necho $$ > {pid_file}\nexec {sys.executable} {HOSTILE} --health-drip 0.3 "$@"\n')
    exe.chmod(0o755)
    m = engine_methods.get("llama.cpp:ngram-mod")(MethodContext(budget=4))
    m.binary, m.gguf = str(exe), "model.gguf"
    m.settings = EngineSettings(model="model.gguf", timeout=3.0, threads=1, vocab_size=1000)
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"was not ready within 3 s \(the last /health probe: http://127\.0\.0\.1:"
                                          r"\d+/health: no answer within [0-9.]+ s \(the whole reply; one readiness "
                                          r"probe\)\)") as info:
        m.generate([5, 6, 7], 8, {EOS}, tmp_path / "run")
    assert time.monotonic() - start < HANG_GUARD_S
    one_clear_line(str(info.value))
    assert m.server is None
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):   # stopped (and reaped) on the way out
        os.kill(pid, 0)
    assert "hostile server listening" in (tmp_path / "run" / "engines" / "llama.cpp-ngram-mod.log").read_text()


def test_a_host_names_lookup_is_within_the_deadline(monkeypatch):
    """The lookup of an --engine-url host name blocks in the resolver, which no socket deadline
    reaches: it runs in a worker the deadline abandons, so the request fails at its deadline while
    the lookup is still stuck (before, the request waited for the resolver, however long)."""
    import socket
    import threading

    real, stuck, released, finished = socket.getaddrinfo, threading.Event(), threading.Event(), threading.Event()

    def slow_lookup(host, *args, **kw):
        if host != "slow-lookup.invalid":
            return real(host, *args, **kw)
        stuck.set()
        released.wait(HANG_GUARD_S)
        finished.set()
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", slow_lookup)
    try:
        with pytest.raises(EngineError, match=r"slow-lookup\.invalid:8080/metrics: no answer within 1 s") as info:
            request_text("http://slow-lookup.invalid:8080/metrics", 1.0)
        one_clear_line(str(info.value))
        assert stuck.is_set() and not finished.is_set()   # it gave up while the lookup was still stuck
    finally:
        released.set()
    with HostileServer() as server:   # an IP literal needs no lookup; a good server still answers
        assert request_text(server.url + "/health", 5.0) == '{"status":"ok"}'


# ----------------------------------------------------------------------------- counters printed rounded

SIX_DIGITS = "%g".__mod__   # how llama-server prints a counter: C++ `<<` of a double, 6 significant digits


def test_printed_bound_is_half_a_unit_of_the_sixth_digit_and_zero_for_numbers_printed_in_full():
    assert [printed_bound(t) for t in ("1.23457e+06", "1e+06", "3e+07", "1.2345678e+06", "1234567", "1234567.0",
                                       "999999", "2.5e-01")] == [5, 5, 50, 0, 0, 0, 0, 0]


def test_llama_cpp_counts_come_from_timings_when_metrics_print_them_rounded():
    """Past a million, llama-server's /metrics reads `1.23457e+06`: around a request of 2 drafts,
    4 draft tokens and 2 accepted, the printed differences are 10 drafts (for 8 tokens), 0 draft
    tokens and 10 accepted, which the plain checks refuse. The row is ok: draft and accepted
    tokens from the reply's exact timings, the drafts from /metrics within their rounding."""
    with HostileServer(start={"drafts": 1_234_564, "draft_tokens": 1_000_010, "accepted": 1_000_004},
                       counts={"drafts": 2, "draft_tokens": 4, "accepted": 2},
                       timings={"draft_n": 4, "draft_n_accepted": 2}, printed=SIX_DIGITS) as server:
        m = engine(server.url, started=True)
        seen, metrics = [], m.metrics
        m.metrics = lambda: seen.append(metrics()) or seen[-1]
        g = m.generate([5, 6, 7], 8, {EOS})
    s = g.stats
    assert s["counters_from"] == "metrics" and s["totals_from"] == "timings"
    assert (s["spec_decode_num_draft_tokens"], s["spec_decode_num_accepted_tokens"]) == (4, 2)
    assert 2 <= s["spec_decode_num_drafts"] <= 7 - 2 and s["spec_decode_num_accepted_tokens_per_pos"] == [1, 1]
    assert sum(g.accept_lengths) == 7 and sum(g.draft_sizes) == 4
    plain = counter_deltas(dict(seen[0]), dict(seen[1]), "llamacpp")   # the values as printed, taken as exact
    assert (plain.drafts, plain.draft_tokens, plain.accepted) == (10, 0, 10)
    with pytest.raises(EngineError, match="10 drafts for an answer of 8 tokens"):
        check_counters(plain, 8, 3)


@pytest.mark.parametrize("start, counts, printed, match", [
    ({"drafts": 1_234_564}, {"drafts": 30}, SIX_DIGITS,
     r"counted 30 \(\+/- 10, as /metrics printed it\) drafts for an answer of 8 tokens"),
    ({"drafts": 1_234_564}, {"drafts": -30}, SIX_DIGITS, r"num_drafts_total went down during the request"),
    ({"drafts": 1_234_564, "draft_tokens": 1_000_010, "accepted": 1_000_004}, {"accepted": 7}, str,
     r"7 accepted tokens of 6 drafted"),
    ({"drafts": 1_234_564}, {"drafts": 9}, str, r"counted 9 drafts for an answer of 8 tokens"),
], ids=["past_the_rounding", "down_past_the_rounding", "exact_accepted_over_drafted", "exact_drafts_over_tokens"])
def test_rounding_is_allowed_only_as_far_as_the_printed_digits_go(start, counts, printed, match):
    """A printed counter is given half a unit of its last digit (6 significant digits), no more;
    counters printed in full are checked exactly, however large."""
    with HostileServer(start=start, counts=counts, printed=printed) as server:
        one_clear_line(refused(engine(server.url, started=True), match)[0])


def test_a_fall_within_the_rounding_is_none():
    before = parse_metrics("llamacpp:spec_decode_num_drafts_total 1.23457e+06\n")
    after = parse_metrics("llamacpp:spec_decode_num_drafts_total 1.23456e+06\n")
    c = counter_deltas(before, after, "llamacpp")
    assert c.drafts == 0 and c.slack == {"drafts": 10}
    with pytest.raises(EngineError, match=r"went down during the request \(1234570 -> 1234560\)"):
        counter_deltas(parse_metrics("llamacpp:spec_decode_num_drafts_total 1234570\n"),
                       parse_metrics("llamacpp:spec_decode_num_drafts_total 1234560\n"), "llamacpp")
