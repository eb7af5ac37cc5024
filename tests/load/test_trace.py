"""Load traces: seeded and replayable (the same seed, the same trace; written and read back equal),
open-loop arrivals with the mean and spread `vllm bench serve`'s gamma arrivals have, and an
edited trace refused by line."""

from __future__ import annotations

import statistics

import pytest

from specbench_cli.errors import UsageError
from specbench_cli.load.trace import (
    Prompt,
    arrival_times,
    build_trace,
    question_order,
    read_trace,
    trace_path,
    write_trace,
)
from specbench_cli.store.load import LoadPoint

PROMPTS = [Prompt(f"q{i}", "cat" if i % 2 else "dog", (1, 2, 3 + i), 8 + i) for i in range(7)]


def test_the_same_seed_gives_the_same_trace_and_another_seed_another_order():
    point = LoadPoint("concurrency", 4, 20, 60.0, warmup=2)
    a, b = build_trace(point, PROMPTS, 0), build_trace(point, PROMPTS, 0)
    assert a == b
    assert [t.index for t in a] == [-1, -2] + list(range(20))
    assert all(t.send_s is None for t in a)                             # closed loop: no times
    assert all(t.max_new_tokens <= 16 for t in a if t.index < 0)        # warm-ups are short
    other = build_trace(point, PROMPTS, 1)
    assert [t.question_id for t in other] != [t.question_id for t in a]


def test_more_requests_than_questions_cycle_through_every_question_each_pass():
    order = question_order(7, 21, seed=3)
    for k in range(3):
        assert sorted(order[7 * k:7 * k + 7]) == list(range(7))
    assert order[:7] != order[7:14] or order[7:14] != order[14:]      # passes are shuffled anew


def test_poisson_arrivals_have_the_rates_mean_gap():
    times = arrival_times(4000, rate=2.0, burstiness=1.0, seed=0)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] == 0.0 and all(g >= 0 for g in gaps)
    assert statistics.mean(gaps) == pytest.approx(0.5, rel=0.06)
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.1)   # exponential: CV 1
    assert arrival_times(50, 2.0, 1.0, 0) == times[:50]                                    # seeded
    assert arrival_times(50, 2.0, 1.0, 1) != times[:50]


def test_burstiness_keeps_the_mean_and_changes_the_spread():
    for shape in (0.25, 4.0):
        times = arrival_times(4000, rate=2.0, burstiness=shape, seed=5)
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert statistics.mean(gaps) == pytest.approx(0.5, rel=0.12)
        cv = statistics.stdev(gaps) / statistics.mean(gaps)
        assert cv == pytest.approx(shape ** -0.5, rel=0.15)             # gamma: CV = 1 / sqrt(shape)


def test_a_written_trace_reads_back_equal(tmp_path):
    point = LoadPoint("rate", 1.5, 9, 60.0, warmup=1)
    trace = build_trace(point, PROMPTS, 7)
    path = trace_path(tmp_path, point)
    assert path == tmp_path / "trace" / "r1.5.jsonl"
    write_trace(path, trace)
    assert read_trace(path, 100, point) == trace
    assert [t.send_s for t in trace if t.index >= 0] == sorted(t.send_s for t in trace if t.index >= 0)


@pytest.mark.parametrize("edit, words", [
    (lambda line: line.replace('"max_new_tokens": 8', '"max_new_tokens": 0'), "max_new_tokens"),
    (lambda line: line.replace('"prompt_ids": [1, 2, 3]', '"prompt_ids": [1, 2, 500]'), "vocabulary"),
    (lambda line: line.replace('"index": 0', '"index": 5'), "index"),
    (lambda line: line.replace('"send_s": null', '"send_s": 3.0'), "send_s"),
])
def test_an_edited_trace_is_refused_by_line(tmp_path, edit, words):
    point = LoadPoint("concurrency", 1, 3, 60.0)
    prompts = [Prompt("q0", "c", (1, 2, 3), 8)]
    path = trace_path(tmp_path, point)
    write_trace(path, build_trace(point, prompts, 0))
    lines = path.read_text().splitlines()
    lines[0] = edit(lines[0])
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=words):
        read_trace(path, 100, point)


def test_a_link_planted_at_the_trace_folder_is_not_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "trace").symlink_to(elsewhere)
    point = LoadPoint("concurrency", 1, 2, 60.0)
    with pytest.raises(UsageError, match="symbolic link"):
        write_trace(trace_path(run, point), build_trace(point, PROMPTS, 0))
    assert not any(elsewhere.iterdir())
