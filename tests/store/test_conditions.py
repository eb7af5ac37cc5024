"""Timings carry their conditions: the manifest records the machine and its load, reports warn
about runs timed on a busy machine, `check` refuses to judge their speed, and the live progress
line shows tok/s on the tables' basis."""

from __future__ import annotations

import json

import pytest
from helpers.cli import cli, only_run_dir, tiny_run_args
from helpers.rows import synthetic_rows, write_run

from specbench_cli.report import metrics
from specbench_cli.run.runner import Live
from specbench_cli.store.conditions import BUSY_MARGIN, LoadWatch, busy_reason


def _record(threads: int, peak: float) -> dict:
    return {"threads": threads, "started": "s", "finished": "f", "load_start": [0.1, 0.1, 0.1],
            "load_end": [peak, 1.0, 1.0], "load_max_1min": peak}


def test_busy_means_a_load_above_the_runs_own_threads():
    assert busy_reason({"timing_conditions": [_record(2, 2.0 + BUSY_MARGIN)]}) is None
    why = busy_reason({"timing_conditions": [_record(2, 1.5), _record(2, 3.9)]})
    assert why == "1-minute load average up to 3.9 with 2 thread(s)"
    assert busy_reason({}) is None  # not recorded (older runs): nothing to say
    assert busy_reason({"timing_conditions": ["junk", {"threads": "2", "load_max_1min": 9}]}) is None


def test_load_watch_keeps_the_highest_sample(monkeypatch):
    loads = iter([(0.5, 0, 0), (3.0, 0, 0), (1.0, 0, 0), (1.1, 0, 0), (1.2, 0, 0)])
    monkeypatch.setattr("os.getloadavg", lambda: next(loads))
    watch = LoadWatch(threads=2)
    watch.sample()
    watch.sample()
    rec = watch.record("a", "b")
    assert rec["load_start"] == [0.5, 0, 0] and rec["load_max_1min"] == 3.0 and rec["load_end"] == [1.2, 0, 0]


def test_a_run_records_cpu_threads_and_load(tiny_model_dir, tmp_path, capsys):
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 0, err
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["host"]["cpu_model"] and manifest["host"]["cpu_count"] >= 1 and "gpu" in manifest["host"]
    (rec,) = manifest["timing_conditions"]
    assert rec["threads"] == manifest["config"]["threads"] == 1
    assert len(rec["load_start"]) == 3 and len(rec["load_end"]) == 3 and rec["load_max_1min"] >= 0


def _busy_run(folder, peak: float):
    run = write_run(folder, synthetic_rows(seed=3, methods=("pld",), questions_per_category=2))
    doc = json.loads((run / "manifest.json").read_text())
    doc["timing_conditions"] = [_record(doc["config"]["threads"], peak)]
    (run / "manifest.json").write_text(json.dumps(doc))
    return run


def test_report_warns_under_the_table_about_a_busy_run(tmp_path, capsys):
    busy = _busy_run(tmp_path / "busy", peak=9.5)
    code, out, err = cli(["report", str(busy), "--no-plots"], capsys)
    assert code == 0
    assert "timed on a busy machine" in " ".join(err.split()) and "9.5" in err
    assert "timed on a busy machine" in (busy / "report" / "table.md").read_text()
    quiet = _busy_run(tmp_path / "quiet", peak=1.0)
    code, out, err = cli(["report", str(quiet), "--no-plots"], capsys)
    assert code == 0 and "busy" not in err


def test_check_refuses_a_busy_run_unless_allowed(tmp_path, capsys):
    quiet = _busy_run(tmp_path / "quiet", peak=1.0)
    assert cli(["baseline", str(quiet), "-o", str(tmp_path / "b.json")], capsys)[0] == 0
    busy = _busy_run(tmp_path / "busy", peak=12.0)
    code, _, err = cli(["check", str(busy), "-b", str(tmp_path / "b.json")], capsys)
    assert code == 2 and "busy machine" in err and "--allow-busy" in err
    code, out, _ = cli(["check", str(busy), "-b", str(tmp_path / "b.json"), "--allow-busy"], capsys)
    assert code == 0 and "judged anyway" in out


def test_report_shows_median_and_ar_agreement_by_default(tmp_path, capsys):
    run = write_run(tmp_path / "r", synthetic_rows(seed=1, methods=("pld",), questions_per_category=1))
    code, out, _ = cli(["report", str(run), "--format", "markdown", "--no-plots"], capsys)
    header = next(line for line in out.splitlines() if line.startswith("| Method"))
    assert code == 0 and "Median" in header and "=AR" in header


def test_live_tok_s_is_the_mean_of_per_question_throughput():
    rows = []
    for qid, turns in (("a", [(10, 1.0), (30, 1.0)]), ("b", [(10, 2.0)])):
        for turn, (tokens, seconds) in enumerate(turns):
            rows.append({"method": "pld", "task": "t", "question_id": qid, "turn": turn, "repeat": 0,
                         "status": "ok", "new_tokens": tokens, "wall_time": seconds, "accept_lengths": [2] * 5,
                         "steps": 5, "category": "c"})
    live = Live()
    for row in rows:
        live.add(row)
    # question a: 40 tokens / 2 s = 20; question b: 5 tok/s; the mean is 12.5 (pooled would be 50/4 = 12.5 too,
    # so add a question that separates the two)
    live.add({**rows[-1], "question_id": "c", "new_tokens": 100, "wall_time": 1.0})
    assert live.tokens_per_s("pld") == pytest.approx((20 + 5 + 100) / 3)
    frame = metrics.question_throughputs([{**r, "model": "m", "method_label": "pld", "block_complexity": 4}
                                          for r in rows + [{**rows[-1], "question_id": "c", "new_tokens": 100,
                                                            "wall_time": 1.0}]])
    assert frame["throughput"].mean() == pytest.approx(live.tokens_per_s("pld"))


def test_reports_name_the_cpu_and_its_instruction_set():
    from specbench_cli.store.conditions import machine_line

    manifest = {"host": {"cpu_model": "Some EPYC", "cpu_flags": ["avx2", "fma"], "device_name": "cpu"},
                "config": {"threads": 2, "dtype": "float32", "forward": "auto"},
                "model": {"forward": "lean", "kernels": {"mode": "auto"}}}
    line = machine_line(manifest)
    assert line == "measured on Some EPYC (AVX2: avx2, fma), 2 threads, float32, forward lean (kernels auto)"
    manifest["host"]["cpu_flags"] = ["avx2", "avx512f", "avx512_bf16", "amx_tile"]
    assert "(AVX-512+AMX: avx2, avx512f, avx512_bf16, amx_tile)" in machine_line(manifest)
    del manifest["host"]["cpu_flags"]  # a run made before the flags were recorded
    assert "Some EPYC (instruction set not recorded)" in machine_line(manifest)
    assert machine_line({}) == "measured on unknown CPU (instruction set not recorded)"


def test_a_new_manifest_records_the_cpu_flags():
    from specbench_cli.store.runfolder import environment

    host = environment()["host"]
    assert isinstance(host["cpu_flags"], list) and all(isinstance(f, str) for f in host["cpu_flags"])
