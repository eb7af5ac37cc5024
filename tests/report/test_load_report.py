"""Load run reports (report/load.py, load_report.py, load_plots.py): every metric against a hand
computation on synthetic run folders (tests/helpers/load_runs.py)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pandas as pd
import pytest
from helpers.load_runs import invoke, point, request, simple_records, simple_run, write_load_run

from specbench_cli.report import load as L
from specbench_cli.store.load import RequestRecord

FEW = 500  # bootstrap resamples where the interval itself is not under test


def summary_of(folder, **kwargs) -> pd.DataFrame:
    return L.point_summary(L.load_run(folder), resamples=kwargs.pop("resamples", FEW), **kwargs)


def row(summary: pd.DataFrame, method: str, point_name: str) -> pd.Series:
    found = summary[(summary["method"] == method) & (summary["point"] == point_name)]
    assert len(found) == 1, f"{method} at {point_name}: {len(found)} rows"
    return found.iloc[0]


# ----------------------------------------------------------------------------- per request


def test_request_times_by_hand():
    r = RequestRecord.from_json(request("pld", "c1", 0, send=1.0, ttft=0.2, latency=1.0, tokens=5,
                                        token_times=[1.2, 1.2, 1.5, 1.8, 2.0], baseline="ar"))
    assert L.ttft(r) == pytest.approx(0.2)
    assert L.latency(r) == pytest.approx(1.0)
    assert L.tpot(r) == pytest.approx(0.8 / 4)               # (end - first) / (tokens - 1)
    assert L.itls(r) == pytest.approx([0.3, 0.3, 0.2])       # two tokens arrived together: one arrival


def test_a_request_without_a_stream_has_ttft_as_latency_and_no_tpot_or_itl():
    r = RequestRecord.from_json(request("ar", "c1", 0, send=0.5, latency=2.0, tokens=8, streamed=False))
    assert L.ttft(r) == pytest.approx(2.0)
    assert L.tpot(r) is None and L.itls(r) is None


def test_an_errored_request_has_no_times():
    r = RequestRecord.from_json(request("ar", "c1", 0, error="connection reset"))
    assert not L.ok(r)
    assert L.ttft(r) is None and L.latency(r) is None and L.tpot(r) is None


def test_position_counts_from_per_position_counts():
    """p_1 = accepted at 1 / drafted at 1; p_k = accepted at k / min(accepted at k-1, drafted at k)."""
    r = RequestRecord(method="x", steps=5, accepted_by_position=[4, 2, 1], drafted_by_position=[5, 5, 5])
    conditional, marginal = L.pooled_acceptance([L.position_counts(r)])
    assert conditional == pytest.approx({1: 4 / 5, 2: 2 / 4, 3: 1 / 2})
    assert marginal == pytest.approx({1: 4 / 5, 2: 2 / 5, 3: 1 / 5})


def test_position_counts_from_accept_lengths_alone():
    """Accepted drafts 2, 1, 0, 3: accepted at 1, 2, 3 = 3, 2, 1 of 4 steps; without draft counts p_1 is
    unknown and p_k = accepted at k / accepted at k-1."""
    r = RequestRecord(method="x", accept_lengths=[3, 2, 1, 4])
    conditional, marginal = L.pooled_acceptance([L.position_counts(r)])
    assert conditional == pytest.approx({2: 2 / 3, 3: 1 / 2})
    assert marginal == pytest.approx({1: 3 / 4, 2: 2 / 4, 3: 1 / 4})


def test_position_counts_with_draft_paths_match_the_main_reports_p_k():
    from specbench_cli.report.metrics import conditional_acceptance

    lengths, paths = [3, 1, 2, 4, 1], [3, 2, 1, 3, 0]
    r = RequestRecord(method="x", accept_lengths=lengths, draft_path_lengths=paths)
    conditional, _ = L.pooled_acceptance([L.position_counts(r)])
    assert conditional == pytest.approx(conditional_acceptance([lengths], [paths]))
    assert conditional[2] == pytest.approx(2 / 2)  # steps with 1 accepted and position 2 drafted: 2, both accepted


# ----------------------------------------------------------------------------- per point


def test_point_metrics_by_hand(tmp_path):
    """simple_run: ar's request i takes 1 + 0.1 i s (sent one after another), 11 tokens, first token at
    0.1 s; pld at c1 takes half as long; SLO TTFT <= 150 ms, TPOT <= 100 ms."""
    summary = summary_of(simple_run(tmp_path / "run", slo={"ttft_ms": 150, "tpot_ms": 100}))
    ar = row(summary, "ar", "c1")
    assert ar["duration_s"] == pytest.approx(7.5)                    # 1.0 + 1.1 + ... + 1.5
    assert ar["output_tok_s"] == pytest.approx(66 / 7.5)
    assert ar["requests_s"] == pytest.approx(6 / 7.5)
    assert ar["good"] == 2                                            # TPOT (lat - 0.1) / 10: 90, 100 ms meet it
    assert ar["goodput"] == pytest.approx(2 / 7.5)
    assert ar["latency_p50"] == pytest.approx(1250.0)                  # ms
    assert ar["latency_p90"] == pytest.approx(1000 * np.percentile([1.0, 1.1, 1.2, 1.3, 1.4, 1.5], 90))
    assert ar["ttft_p99"] == pytest.approx(100.0)
    assert ar["tpot_p50"] == pytest.approx(115.0)
    assert ar["itl_mean"] == pytest.approx(115.0)                     # 10 equal gaps per request
    assert math.isnan(ar["speedup"]) and ar["n_paired"] == 0

    pld = row(summary, "pld", "c1")
    assert pld["duration_s"] == pytest.approx(3.75)
    assert pld["good"] == 6 and pld["goodput"] == pytest.approx(6 / 3.75)
    assert pld["mean_accept_length"] == pytest.approx(10 / 4)         # accept lengths 3, 3, 2, 2
    assert pld["conditional_acceptance"] == pytest.approx({1: 1.0, 2: 0.5, 3: 0.0})
    assert pld["marginal_acceptance"] == pytest.approx({1: 1.0, 2: 0.5, 3: 0.0})
    assert (pld["equal"], pld["compared"]) == (5, 6)                  # request 0's first token differs
    assert pld["lossless"] == pytest.approx(5 / 6)
    assert pld["speedup"] == pytest.approx(2.0) and pld["latency_speedup"] == pytest.approx(2.0)
    assert row(summary, "pld", "c4")["speedup"] == pytest.approx(0.8)
    assert list(summary["method"]) == ["ar"] * 3 + ["pld"] * 3          # baselines first, points in order


def test_throughput_ratio_and_latency_ratio_differ_as_documented(tmp_path):
    """Two pairs: ar 1 s and 3 s, pld 0.5 s and 3 s, 10 tokens each. Throughput ratio (20/3.5) / (20/4) =
    4/3.5; latency speedup geomean(2, 1) = sqrt 2."""
    records = [request("ar", "c1", 0, latency=1.0, tokens=10), request("ar", "c1", 1, send=1, latency=3.0, tokens=10),
               request("pld", "c1", 0, latency=0.5, tokens=10, baseline="ar"),
               request("pld", "c1", 1, send=1, latency=3.0, tokens=10, baseline="ar")]
    pld = row(summary_of(write_load_run(tmp_path / "run", [point("concurrency", 1)], records)), "pld", "c1")
    assert pld["speedup"] == pytest.approx(4 / 3.5)
    assert pld["latency_speedup"] == pytest.approx(math.sqrt(2))


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(7)
    base = rng.uniform(1, 2, 40)
    now = base / rng.uniform(1.1, 1.5, 40)
    tokens = np.full(40, 10)
    a = L.paired_bootstrap(tokens, base, tokens, now, resamples=2000, seed=3)
    b = L.paired_bootstrap(tokens, base, tokens, now, resamples=2000, seed=3)
    c = L.paired_bootstrap(tokens, base, tokens, now, resamples=2000, seed=4)
    assert a == b
    assert a["speedup_low"] != c["speedup_low"]
    assert a["speedup_low"] < a["speedup"] < a["speedup_high"]
    assert a["latency_speedup_low"] < a["latency_speedup"] < a["latency_speedup_high"]
    assert 1.0 < a["speedup_low"]


def test_one_pair_gives_a_point_interval_and_none_gives_nan():
    one = L.paired_bootstrap([10], [2.0], [10], [1.0], resamples=100)
    assert one["speedup"] == one["speedup_low"] == one["speedup_high"] == pytest.approx(2.0)
    assert math.isnan(L.paired_bootstrap([], [], [], [])["speedup"])


def test_pairing_needs_both_requests_ok_and_ids(tmp_path):
    records = [request("ar", "c1", 0), request("ar", "c1", 1, send=1, error="timeout"),
               request("ar", "c1", 2, send=2, output_ids=None),
               request("pld", "c1", 0, baseline="ar"), request("pld", "c1", 1, send=1, baseline="ar"),
               request("pld", "c1", 2, send=2, baseline="ar")]
    records[2]["output_ids"] = None  # a backend that did not return ids
    frame = L.request_frame(L.load_run(write_load_run(tmp_path / "run", [point("concurrency", 1)], records)))
    pld = frame[frame["method"] == "pld"].set_index("index")
    assert pld.at[0, "equal"] is True or pld.at[0, "equal"] == True  # noqa: E712
    assert pld.at[1, "equal"] is None and not pld.at[1, "base_ok"]   # the baseline's request errored
    assert pld.at[2, "equal"] is None and pld.at[2, "base_ok"]       # no ids to compare; still timed
    summary = L.point_summary(L.load_run(tmp_path / "run"), resamples=FEW)
    assert row(summary, "pld", "c1")["n_paired"] == 2


def test_error_rows_are_counted_not_used(tmp_path):
    records = [request("ar", "c2", i, send=i) for i in range(3)]
    records += [request("pld", "c2", 0, baseline="ar", error="server died"),
                request("pld", "c2", 1, send=1, baseline="ar", error="server died"),
                request("pld", "c2", 2, send=2, baseline="ar", error="server died")]
    folder = write_load_run(tmp_path / "run", [point("concurrency", 2)], records)
    pld = row(summary_of(folder), "pld", "c2")
    assert (pld["sent"], pld["completed"], pld["errors"]) == (3, 0, 3)
    assert pld["output_tokens"] == 0 and math.isnan(pld["speedup"]) and math.isnan(pld["ttft_p50"])
    code, output = invoke("report", folder, "--no-plots", "-o", tmp_path / "out")
    assert code == 0, output
    text = (tmp_path / "out" / "load.md").read_text()
    assert "pld at c2: 3 of 3 requests errored" in text
    assert "no ok ar request to pair with" in text


# ----------------------------------------------------------------------------- crossover


def _series(levels, intervals, mode="concurrency", bc=None) -> pd.DataFrame:
    rows = [{"target": "specbench", "method": "pld", "speculative": True, "mode": mode, "level": lv, "bc": bc,
             "point": f"{'c' if mode == 'concurrency' else 'r'}{lv:g}", "speedup": (lo + hi) / 2,
             "speedup_low": lo, "speedup_high": hi} for lv, (lo, hi) in zip(levels, intervals)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("intervals, at, words", [
    ([(1.5, 1.8), (1.2, 1.4), (1.1, 1.2)], None, "pays at every concurrency measured"),
    ([(0.9, 1.1), (0.7, 0.9), (0.5, 0.8)], None, "never pays"),
    ([(0.7, 0.9), (0.6, 0.8), (0.5, 0.8)], None, "slower at every concurrency"),
    ([(1.5, 1.8), (0.95, 1.05), (0.7, 0.8)], "c2", "falls through 1"),
    ([(1.5, 1.8), (1.2, 1.3), (0.7, 0.8)], "c4", "falls below 1"),
    ([(1.5, 1.8), (0.9, 1.1), (1.1, 1.2)], "c2", "pays again at c4"),
])
def test_crossover(intervals, at, words):
    (found,) = L.crossovers(_series([1, 2, 4], intervals))
    assert found.at == at
    assert words in found.text


def test_crossover_runs_per_axis_and_block_complexity():
    frame = pd.concat([_series([1, 2], [(1.2, 1.3), (0.8, 0.9)]),
                       _series([0.5, 1.0], [(1.2, 1.3), (1.1, 1.2)], mode="rate"),
                       _series([1, 2], [(1.2, 1.3), (1.1, 1.2)], bc=4)])
    found = {(c.mode, L._bc_key(c.bc)): c for c in L.crossovers(frame)}
    assert found[("concurrency", "")].at == "c2"
    assert found[("rate", "")].at is None and "pays at every request rate" in found[("rate", "")].text
    assert found[("concurrency", "4")].at is None


# ----------------------------------------------------------------------------- draft length per concurrency


def _bc_sweep(tmp_path, adaptive: bool = False, slo=None):
    """pld at c1 and c2, BC 2, 4, 8 (and adaptive): its latency is ar's / factor; ar runs at c1 and c2
    only (pld's -bc points pair with it). Factors: c1: BC 8 best; c2: BC 4 best."""
    factors = {("c1", 2): 1.2, ("c1", 4): 1.5, ("c1", 8): 1.9, ("c2", 2): 1.1, ("c2", 4): 1.3, ("c2", 8): 0.9,
               ("c1", "adaptive"): 2.0, ("c2", "adaptive"): 1.2}
    records, points = [], []
    for level in (1, 2):
        points.append(point("concurrency", level))
        for i in range(4):
            records.append(request("ar", f"c{level}", i, send=i * 2.0, latency=1.0, tokens=11))
        for bc in (2, 4, 8) + (("adaptive",) if adaptive else ()):
            points.append(point("concurrency", level, bc))
            name = f"c{level}-bc{bc}"
            for i in range(4):
                records.append(request("pld", name, i, send=i * 2.0, latency=1.0 / factors[(f"c{level}", bc)],
                                       tokens=11, baseline="ar", ttft=0.05, accept_lengths=[3, 2, 2, 3][i:] + [1] * i))
    return write_load_run(tmp_path / "sweep", points, records, slo=slo)


def test_schedule_picks_the_best_block_complexity_per_concurrency(tmp_path):
    summary = summary_of(_bc_sweep(tmp_path))
    assert row(summary, "pld", "c1-bc8")["speedup"] == pytest.approx(1.9)  # paired with ar at c1
    plan = L.schedules(summary, None)
    assert plan["pld"]["objective"] == "output_tok_s"
    assert plan["pld"]["block_complexity_per_concurrency"] == {"1": 8, "2": 4}
    assert plan["pld"]["num_speculative_tokens_per_batch_size"] == [[1, 1, 7], [2, 2, 3]]
    assert plan["pld"]["num_speculative_tokens"] == 7


def test_schedule_ties_go_to_the_smaller_block_complexity_and_goodput_rules_with_an_slo(tmp_path):
    summary = summary_of(_bc_sweep(tmp_path, slo={"ttft_ms": 1000}))
    plan = L.schedules(summary, {"ttft_ms": 1000})
    # every request meets the SLO: goodput is 4 requests over a duration that ends with the last request
    assert plan["pld"]["objective"] == "goodput"
    assert row(summary, "pld", "c1-bc8")["goodput"] == pytest.approx(4 / (6 + 1 / 1.9))
    assert plan["pld"]["block_complexity_per_concurrency"] == {"1": 8, "2": 4}
    tied = summary.copy()
    tied.loc[tied["method"] == "pld", "output_tok_s"] = 5.0
    assert L.schedules(tied, None)["pld"]["block_complexity_per_concurrency"] == {"1": 2, "2": 2}


def test_vllm_ranges_merge_equal_k():
    assert L.vllm_ranges({1: 5, 2: 5, 4: 3, 8: 2}) == [[1, 3, 4], [4, 7, 2], [8, 8, 1]]


def test_adaptive_against_the_schedule(tmp_path):
    summary = summary_of(_bc_sweep(tmp_path, adaptive=True))
    plan = L.schedules(summary, None)
    assert plan["pld"]["block_complexity_per_concurrency"] == {"1": 8, "2": 4}   # adaptive is not a candidate
    rows = {r["level"]: r for r in L.adaptive_rows(summary, plan)}
    assert rows[1.0]["scheduled_bc"] == 8 and rows[2.0]["scheduled_bc"] == 4
    assert rows[1.0]["adaptive_speedup"] == pytest.approx(2.0)
    assert rows[2.0]["adaptive_speedup"] == pytest.approx(1.2)
    assert rows[2.0]["ratio"] < 1 < rows[1.0]["ratio"]


def test_report_writes_the_schedule(tmp_path):
    folder = _bc_sweep(tmp_path, adaptive=True)
    code, output = invoke("report", folder, "--no-plots", "-o", tmp_path / "out")
    assert code == 0, output
    doc = json.loads((tmp_path / "out" / "schedule.json").read_text())
    assert doc["methods"]["pld"]["num_speculative_tokens_per_batch_size"] == [[1, 1, 7], [2, 2, 3]]
    text = (tmp_path / "out" / "load.md").read_text()
    assert "**Draft length per concurrency**" in text and "**Adaptive budget against the schedule**" in text


# ----------------------------------------------------------------------------- folders and rendering


def test_missing_unfinished_and_damaged_points_render_with_what_exists(tmp_path):
    records = [r for r in simple_records() if r["point"] != "c4"]
    points = [point("concurrency", c) for c in (1, 2, 4, 8)]
    folder = write_load_run(tmp_path / "run", points, records, unfinished=[("c2", "pld")],
                            extra_lines={("c1", "pld"): "{not json\n", ("c2", "ar"): '{"method": "ar", "point": "c2"'})
    run = L.load_run(folder)
    assert any("unfinished" in w and "c2" in w for w in run.warnings)
    assert any("pld.jsonl:7: not valid JSON" in w for w in run.warnings)
    assert any("truncated final line" in w for w in run.warnings)
    assert any("c4, c8" in w for w in run.warnings)
    code, output = invoke("report", folder, "--no-plots", "-o", tmp_path / "out")
    assert code == 0, output
    text = (tmp_path / "out" / "load.md").read_text()
    assert "pld at c2: unfinished" in text and "not run yet: c4, c8" in text
    assert "| pld | c1 |" in text


def test_report_of_an_empty_load_run_says_so(tmp_path):
    folder = write_load_run(tmp_path / "run", [point("concurrency", 1)], [], methods=["ar", "pld"])
    code, output = invoke("report", folder, "--no-plots")
    assert code == 2 and "no request recorded" in output


def test_report_formats_and_csv_numbers(tmp_path):
    folder = simple_run(tmp_path / "run")
    code, output = invoke("report", folder, "--no-plots", "--format", "csv", "-o", tmp_path / "out")
    assert code == 0, output
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["load.csv"]
    frame = pd.read_csv(tmp_path / "out" / "load.csv")
    assert {"speedup", "speedup_low", "speedup_high", "ttft_p99", "latency_speedup_high"} <= set(frame.columns)
    assert frame.loc[(frame["method"] == "pld") & (frame["point"] == "c2"), "speedup"].item() == pytest.approx(1.5)
    code, output = invoke("report", folder, "--no-plots", "--format", "latex", "-o", tmp_path / "tex")
    assert code == 0 and output.startswith(r"\documentclass{article}")
    code, output = invoke("report", folder, "--no-plots", "--format", "json", "-o", tmp_path / "json")
    doc = json.loads((tmp_path / "json" / "load.json").read_text())
    assert [t["title"] for t in doc["tables"]][:2] == ["Acceptance per draft position under load",
                                                       "Where speculation stops paying"]
    assert doc["summary"][3]["conditional_acceptance"] == {"1": 1.0, "2": 0.5, "3": 0.0}


def test_a_load_run_is_reported_on_its_own(tmp_path):
    from helpers.rows import synthetic_rows, write_run

    other = write_run(tmp_path / "plain", synthetic_rows(questions_per_category=1))
    code, output = invoke("report", simple_run(tmp_path / "run"), other, "--no-plots")
    assert code == 2 and "reported on its own" in output


def test_the_same_load_run_folder_gives_the_same_bytes(tmp_path):
    """Tables, PNG and PDF figures and the HTML page with its SVG figures: byte for byte the same."""
    folder = _bc_sweep(tmp_path, adaptive=True)
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        assert invoke("report", folder, "-o", out)[0] == 0
        assert invoke("report", folder, "--html", "-o", out / "page.html")[0] == 0
        outs.append({p.name: p.read_bytes() for p in out.iterdir()})
        time.sleep(1.1)  # a PDF's date has one-second resolution
    assert {"speedup_vs_concurrency.pdf", "latency_throughput.png", "ttft_tpot_percentiles.pdf",
            "accept_length_histogram.png", "page.html", "schedule.json", "load.md"} <= set(outs[0])
    assert outs[0] == outs[1]
    assert outs[0]["page.html"].count(b"<svg") >= 3


def test_rate_points_get_their_own_axis_and_figure(tmp_path):
    records = simple_records(factors={"r0.5": 1.4, "r1": 0.7})
    folder = write_load_run(tmp_path / "run", [point("rate", 0.5), point("rate", 1.0)], records)
    summary = summary_of(folder)
    (found,) = L.crossovers(summary)
    assert found.mode == "rate" and found.at == "r1"
    code, output = invoke("report", folder, "-o", tmp_path / "out")
    assert code == 0, output
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert "speedup_vs_rate.png" in names and "speedup_vs_concurrency.png" not in names


def test_requests_without_a_stream_are_said_so(tmp_path):
    records = [request("ar", "c1", i, send=i, streamed=False) for i in range(3)]
    records += [request("pld", "c1", i, send=i, latency=0.5, baseline="ar", streamed=i > 0) for i in range(3)]
    folder = write_load_run(tmp_path / "run", [point("concurrency", 1)], records)
    summary = summary_of(folder)
    assert row(summary, "ar", "c1")["streamed"] == "no" and row(summary, "pld", "c1")["streamed"] == "part"
    assert math.isnan(row(summary, "ar", "c1")["tpot_p50"])
    assert row(summary, "ar", "c1")["ttft_p50"] == pytest.approx(1000.0)  # the whole latency
    code, output = invoke("report", folder, "--no-plots", "-o", tmp_path / "out")
    text = (tmp_path / "out" / "load.md").read_text()
    assert "| Streamed |" in text and "ar at c1: no requests were streamed" in text


def test_hostile_labels_render(tmp_path):
    label = "pld $x^$\n\x1b[31m<b>"
    records = [request("ar", "c1", i, send=i) for i in range(2)]
    records += [request(label, "c1", i, send=i, latency=0.5, baseline="ar", accept_lengths=[2, 3]) for i in range(2)]
    folder = write_load_run(tmp_path / "run", [point("concurrency", 1)], records)
    for args in ([], ["--html", "-o", tmp_path / "page.html"]):
        code, output = invoke("report", folder, *args)
        assert code == 0, output
    page = (tmp_path / "page.html").read_text()
    assert "<b>" not in page and "&lt;b&gt;" in page and "\x1b" not in page
