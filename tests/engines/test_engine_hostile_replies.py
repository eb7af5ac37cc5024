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
from types import SimpleNamespace

import pytest
from hostile_server import HostileServer  # tests/engines is on the path (pytest's rootdir-less import)

from specbench_cli.engines import methods as engine_methods
from specbench_cli.engines.method import EngineSettings
from specbench_cli.engines.server import EngineError, request_json, request_text
from specbench_cli.methods.core.method import MethodContext

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

