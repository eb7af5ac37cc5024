"""`specbench check` and `specbench baseline` of load runs (report/load_gate.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.load_runs import invoke, point, request, simple_run, write_load_run

from specbench_cli.errors import UsageError
from specbench_cli.report import load_gate


def noisy_run(folder, factor_c1: float = 2.0, seed: int = 0, differ: tuple = ()):
    """ar and pld at c1 and c4, 20 requests each with latencies drawn from a seeded generator; pld's
    latency is ar's / factor (c1: `factor_c1`, c4: 0.8) times a little noise. `differ`: pld request
    indices whose output differs from ar's."""
    rng = np.random.default_rng(seed)
    records = []
    for name, factor in (("c1", factor_c1), ("c4", 0.8)):
        for i in range(20):
            lat = float(rng.uniform(1.0, 2.0))
            records.append(request("ar", name, i, send=2.0 * i, latency=lat, tokens=11))
            ids = [1000 + i * 7 + k for k in range(11)]
            if i in differ:
                ids = [5] + ids[1:]
            records.append(request("pld", name, i, send=2.0 * i, latency=lat / factor * float(rng.uniform(0.97, 1.03)),
                                   tokens=11, baseline="ar", output_ids=ids))
    return write_load_run(folder, [point("concurrency", 1), point("concurrency", 4)], records)


def test_a_run_checked_against_itself_passes(tmp_path):
    run = noisy_run(tmp_path / "a")
    code, output = invoke("check", run, "--baseline", run, "--resamples", "1000")
    assert code == 0, output
    assert "ok: 2 load check(s) within tolerance" in " ".join(output.split())


def test_a_slower_run_fails_through_a_baseline_json(tmp_path):
    base = noisy_run(tmp_path / "base", seed=1)
    slower = noisy_run(tmp_path / "slow", factor_c1=1.5, seed=2)
    baseline = tmp_path / "base.json"
    code, output = invoke("baseline", base, "-o", baseline)
    assert code == 0, output
    doc = json.loads(baseline.read_text())
    assert doc["format"] == "specbench-load-baseline" and len(doc["requests"]) == 40
    code, output = invoke("check", slower, "--baseline", baseline, "--resamples", "1000")
    assert code == 1, output
    assert "FAIL" in output and "pld at c1" in output
    assert "pld at c4" not in [line for line in output.splitlines() if "FAIL" in line]
    code, output = invoke("check", noisy_run(tmp_path / "same", seed=3), "--baseline", baseline, "--resamples", "1000")
    assert code == 0, output


def test_outputs_that_stop_equalling_the_baseline_fail(tmp_path):
    base = noisy_run(tmp_path / "base")
    changed = noisy_run(tmp_path / "changed", differ=(3, 4))
    code, output = invoke("check", changed, "--baseline", base, "--resamples", "1000")
    assert code == 1, output
    assert "2 request(s) equal to the baseline's output before differ now" in output


@pytest.mark.parametrize("threshold, code", [("c1=1.5", 0), ("c4:pld=1.0", 1), ("*=0.5", 0), ("*:pld=1.0", 1)])
def test_speedup_thresholds(tmp_path, threshold, code):
    got, output = invoke("check", noisy_run(tmp_path / "run"), "--min-speedup", threshold, "--resamples", "1000")
    assert got == code, output


@pytest.mark.parametrize("args, message", [
    (["--min-speedup", "c9=1.1"], "matched no speculative method"),
    (["--min-speedup", "c1"], "POINT[:METHOD]=VALUE"),
    (["--min-speedup", "c1=-1"], "POINT[:METHOD]=VALUE"),
    ([], "needs --baseline"),
])
def test_bad_load_checks_exit_2(tmp_path, args, message):
    code, output = invoke("check", simple_run(tmp_path / "run"), *args, "--resamples", "1000")
    assert code == 2 and message in output


def test_a_baseline_of_another_setting_is_refused(tmp_path):
    base = noisy_run(tmp_path / "base")
    manifest = json.loads((base / "manifest.json").read_text())
    manifest["config"]["max_new_tokens"] = 64
    (base / "manifest.json").write_text(json.dumps(manifest))
    code, output = invoke("check", noisy_run(tmp_path / "now"), "--baseline", base)
    assert code == 2 and "max_new_tokens" in output


def test_min_speedup_on_an_ordinary_run_is_refused(tmp_path):
    from helpers.rows import synthetic_rows, write_run

    run = write_run(tmp_path / "plain", synthetic_rows(questions_per_category=1))
    code, output = invoke("check", run, "--min-speedup", "c1=1.1")
    assert code == 2 and "not a load run" in output


def test_parse_threshold_keeps_engine_labels():
    t = load_gate.parse_threshold("c4:llama.cpp:ngram-mod=1.05")
    assert (t.point, t.method, t.value) == ("c4", "llama.cpp:ngram-mod", 1.05)
    with pytest.raises(UsageError):
        load_gate.parse_threshold("=1")


def test_judge_speed_hand_case():
    """One pair per side: base speedup 2, now 1.5: change -25% with a point interval."""
    base = [{"point": "c1", "method": "pld", "index": 0, "question_id": "q", "tokens": 10, "latency": 1.0,
             "base_tokens": 10, "base_latency": 2.0}]
    now = [{**base[0], "latency": 4 / 3}]
    (v,) = load_gate.judge_speed(base, now, resamples=200)
    assert (v.base, v.now, v.change) == pytest.approx((2.0, 1.5, -0.25))
    assert v.low == pytest.approx(-0.25) and v.verdict == "slower"
