"""`specbench load` end to end on a fake llama-server (tests/load/fake_stream_server.py, started as a
real one is): the folder (manifest, traces, records, `.done`), the same trace for every method,
the server's slots, resuming (a finished pair is skipped, an unfinished one redone from the
written trace), bad input refused before anything starts, a dying server's error records, and
Ctrl-C stopping every server and keeping the finished pairs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.cli import cli  # noqa: E402
from helpers.embedded import needs_model  # noqa: E402
from helpers.signals import sigint_default  # noqa: E402

FAKE = Path(__file__).with_name("fake_stream_server.py")
METHODS = ("llama.cpp:ar", "llama.cpp:ngram-mod")


def fake_binary(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    exe.chmod(0o755)
    return exe


def args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return ["load", "--engine-bin", str(fake_binary(tmp_path)), "--methods", ",".join(METHODS),
            "--categories", "qa,translation", "--limit", "1", "--max-new-tokens", "6", "--num-prompts", "3",
            "--threads", "1", "--output-dir", str(out), *extra]


def records(out: Path, point: str, method: str) -> list[dict]:
    path = out / "load" / point / f"{method.replace(':', '-')}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def started(record: Path) -> list[dict]:
    return [json.loads(x) for x in record.read_text().splitlines() if '"np"' in x] if record.exists() else []


@pytest.fixture
def fake_env(monkeypatch, tmp_path):
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("FAKE_STREAM_RECORD", str(record))
    monkeypatch.setenv("FAKE_STREAM_MODE", "ok")
    return record


@pytest.mark.parametrize("flag, value, words", [
    ("--concurrency", "0", "--concurrency"), ("--concurrency", "2,x", "--concurrency"),
    ("--request-rate", "-1", "--request-rate"), ("--request-rate", "nan", "--request-rate"),
    ("--slo", "ttft:0", "--slo"), ("--slo", "speed:3", "--slo"), ("--bc", "auto", "--bc"),
    ("--burstiness", "0", "--burstiness"), ("--warmup", "-1", "--warmup"), ("--methods", "nosuch", "nosuch"),
    ("--max-concurrency", "0", "--max-concurrency"), ("--time-limit", "0", "--time-limit"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(tmp_path, capsys, fake_env, flag, value, words):
    out = tmp_path / "out"
    code, _, err = cli([*args(tmp_path, out), flag, value], capsys)
    assert code == 2, err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not fake_env.exists()


@needs_model
def test_a_load_run_its_folder_resuming_and_its_settings(tmp_path, capsys, fake_env):
    out = tmp_path / "out"
    code, _, err = cli(args(tmp_path, out, "--concurrency", "1,2", "--request-rate", "20", "--slo",
                            "ttft:500,tpot:50"), capsys)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "load" and manifest["methods"] == list(METHODS)
    assert [p["name"] for p in manifest["points"]] == ["c1", "c2", "r20"]
    assert manifest["baselines"] == {"llama.cpp:ar": "", "llama.cpp:ngram-mod": "llama.cpp:ar"}
    assert manifest["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0} and manifest["config"]["max_new_tokens"] == 6
    assert "host" in manifest["machine"]
    servers = started(fake_env)
    assert len(servers) == 6 and {s["np"] for s in servers} == {2}     # a fresh server per pair, 2 slots
    assert all(s["c"] % 2 == 0 and s["c"] // 2 >= 256 for s in servers)  # -c covers 2 slots of the needed context
    for point in ("c1", "c2", "r20"):
        trace = [json.loads(x) for x in (out / "trace" / f"{point}.jsonl").read_text().splitlines()]
        assert [t["index"] for t in trace] == [-1, 0, 1, 2]
        ar, spec = records(out, point, METHODS[0]), records(out, point, METHODS[1])
        assert sorted(r["index"] for r in ar) == sorted(r["index"] for r in spec) == [0, 1, 2]
        by = {r["index"]: r for r in ar}
        for r in spec:   # the same request, speculation on and off
            assert r["question_id"] == by[r["index"]]["question_id"] == trace[r["index"] + 1]["question_id"]
            assert r["output_ids"] == by[r["index"]]["output_ids"] and r["new_tokens"] == 6
            assert r["baseline"] == "llama.cpp:ar" and r["speculative"] and not by[r["index"]]["speculative"]
            assert r["point"] == point and r["error"] is None
        for m in METHODS:
            assert (out / "load" / point / f"{m.replace(':', '-')}.done").is_file()
    assert all(r["acceptance_source"] == "metrics-delta" for r in records(out, "c1", METHODS[1]))
    sends = [t["send_s"] for t in map(json.loads, (out / "trace" / "r20.jsonl").read_text().splitlines())][1:]
    assert sends[0] == 0.0 and sends == sorted(sends)

    # the same command again: everything is finished, nothing starts
    code, _, err = cli(args(tmp_path, out, "--concurrency", "1,2", "--request-rate", "20", "--slo",
                            "ttft:500,tpot:50"), capsys)
    assert code == 0 and "6 of 6" in " ".join(err.split()) and len(started(fake_env)) == 6, err

    # an unfinished pair is redone, from the trace as written
    (out / "load" / "c2" / "llama.cpp-ngram-mod.done").unlink()
    path = out / "trace" / "c2.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[1])
    first["question_id"] = "edited"
    lines[1] = json.dumps(first)
    path.write_text("\n".join(lines) + "\n")
    code, _, err = cli(["load", "--resume", str(out), "--engine-bin", str(fake_binary(tmp_path))], capsys)
    assert code == 0, err
    assert len(started(fake_env)) == 7
    assert {r["question_id"] for r in records(out, "c2", METHODS[1]) if r["index"] == 0} == {"edited"}
    assert len(records(out, "c2", METHODS[1])) == 3

    # other settings in the same folder, or settings given with --resume: refused
    code, _, err = cli(args(tmp_path, out, "--concurrency", "1,4"), capsys)
    assert code == 2 and "other settings" in " ".join(err.split()) and "concurrency" in err, err
    code, _, err = cli(["load", "--resume", str(out), "--concurrency", "3"], capsys)
    assert code == 2 and "--concurrency" in err, err
    assert len(started(fake_env)) == 7


@needs_model
def test_a_server_that_dies_leaves_error_records_with_its_log_and_exit_1(tmp_path, capsys, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_STREAM_MODE", "die")
    monkeypatch.setenv("FAKE_STREAM_AT", "3")   # the warm-up, one request, then it dies
    out = tmp_path / "out"
    code, _, err = cli(args(tmp_path, out, "--concurrency", "1", "--methods", "llama.cpp:ar"), capsys)
    assert code == 1 and "request(s) failed" in " ".join(err.split()), err
    recs = sorted(records(out, "c1", "llama.cpp:ar"), key=lambda r: r["index"])
    assert recs[0]["error"] is None
    assert all("fatal: the fake server broke down" in r["log_tail"] for r in recs[1:])


@needs_model
def test_ctrl_c_stops_every_server_and_keeps_the_finished_pairs(tmp_path, fake_env):
    out = tmp_path / "out"
    env = {**os.environ, "FAKE_STREAM_DELAY": "0.5"}
    proc = subprocess.Popen([sys.executable, "-m", "specbench_cli", *args(tmp_path, out, "--concurrency", "1")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (out / "load" / "c1" / "llama.cpp-ar.done").exists():
            time.sleep(0.2)
        assert (out / "load" / "c1" / "llama.cpp-ar.done").exists()
        while time.monotonic() < deadline and len(started(fake_env)) < 2:
            time.sleep(0.1)
        time.sleep(1.0)                                  # the second server is mid-request
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "--resume" in err
    for s in started(fake_env):                          # every server stopped
        with pytest.raises(ProcessLookupError):
            os.kill(s["pid"], 0)
    assert not (out / "load" / "c1" / "llama.cpp-ngram-mod.done").exists()
    assert len(records(out, "c1", "llama.cpp:ar")) == 3
