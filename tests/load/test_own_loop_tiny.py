"""The own loop's backend (load/own_loop.py) on the tiny model, fast: a closed loop keeps N in
flight, an open loop admits at the send times, warm-up requests are served but not recorded,
the time limit stops admission, records are consistent, and what cannot run is refused with one
line before any model loads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers.tiny import EOS

from specbench_cli import methods
from specbench_cli.config.fields import RunConfig
from specbench_cli.config.instance import parse_instance
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.load.own_loop import OwnLoopBackend, refusal
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.store.load import LoadPoint, TraceRequest
from specbench_cli.targets import as_target

PROMPTS = [
    [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14],
    [2, 40, 41, 42, 40, 41, 42, 40, 41],
    [2, 77],
    [2, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61],
    [2, 50, 51, 50, 51, 50],
]
CAPS = [20, 9, 14, 6, 17]
BUDGET = 6


@pytest.fixture(scope="module")
def loaded(tiny_model, tiny_tok):
    return SimpleNamespace(target=as_target(tiny_model), tokenizer=tiny_tok, trust_remote_code=False)


@pytest.fixture(scope="module")
def alone(tiny_model):
    dec = Decoder(as_target(tiny_model), {EOS})
    ar = methods.get("ar").create(MethodContext(tiny_model, None, budget=BUDGET))
    return [dec.generate(ar, p, c, BUDGET).output_ids for p, c in zip(PROMPTS, CAPS)]


def _trace(gap=None):
    warm = TraceRequest(-1, "w", "w", 0, tuple(PROMPTS[2]), 3, None)
    return [warm] + [TraceRequest(i, f"q{i}", "c", 0, tuple(p), c, None if gap is None else gap * i)
                     for i, (p, c) in enumerate(zip(PROMPTS, CAPS))]


def _serve(loaded, name, point, trace):
    backend = OwnLoopBackend(RunConfig.from_flat({"block_complexity": BUDGET}), parse_instance(name), loaded)
    out = []
    backend.start()
    try:
        backend.serve(point, trace, out.append)
    finally:
        backend.stop()
    return {r.index: r for r in out}


@pytest.mark.parametrize("name", ["ar", "pld", "suffix", "synthetic"])
def test_a_closed_loop_keeps_n_in_flight_and_records_each_request(loaded, alone, name):
    got = _serve(loaded, name, LoadPoint("concurrency", 2, 10, 600.0, warmup=1), _trace())
    assert sorted(got) == list(range(len(PROMPTS)))  # the warm-up (index -1) is not recorded
    for i, ref in enumerate(alone):
        rec = got[i]
        assert rec.error is None and rec.output_ids == ref and rec.point == "c2" and rec.method == name
        assert rec.baseline == ("" if name == "ar" else "ar") and rec.speculative == (name != "ar")
        assert len(rec.token_times_s) == rec.new_tokens == len(ref) and rec.prompt_tokens == len(PROMPTS[i])
        assert rec.send_s <= rec.first_token_s <= rec.end_s == rec.token_times_s[-1]
        assert rec.steps == len(rec.batch_sizes) and max(rec.batch_sizes) <= 2
    # closed loop: request 2 is sent when one of the first two ends, not before
    assert got[2].send_s >= min(got[0].end_s, got[1].end_s)
    if name == "synthetic":  # it found its references itself, and drafted from them
        assert sum(r.accepted for r in got.values()) > 0


def test_an_open_loop_admits_at_the_send_times(loaded, alone):
    got = _serve(loaded, "pld", LoadPoint("rate", 20.0, 10, 600.0), _trace(gap=0.05))
    for i, ref in enumerate(alone):
        assert got[i].output_ids == ref and got[i].send_s == pytest.approx(0.05 * i)
        assert got[i].first_token_s >= got[i].send_s


def test_the_time_limit_stops_admission_and_max_requests_bounds_the_point(loaded):
    assert _serve(loaded, "pld", LoadPoint("rate", 1.0, 10, 0.0), _trace(gap=0.01)) == {}
    got = _serve(loaded, "pld", LoadPoint("concurrency", 2, 3, 600.0), _trace())
    assert sorted(got) == [0, 1, 2]


def test_what_cannot_run_in_the_own_loop_is_refused_with_one_line(loaded):
    cfg = RunConfig.from_flat({"block_complexity": BUDGET})
    assert refusal(cfg, parse_instance("pld")) is None
    line = refusal(cfg, parse_instance("llama.cpp:ngram-mod"))
    assert line and "\n" not in line and "server" in line
    line = refusal(RunConfig.from_flat({"block_complexity": BUDGET, "target": "llama.cpp"}), parse_instance("pld"))
    assert line and "running batch" in line
    with pytest.raises(UsageError, match="engine"):
        OwnLoopBackend(cfg, parse_instance("llama.cpp:ngram-mod"), loaded)
