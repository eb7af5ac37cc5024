"""Engine methods on a real `llama-server` (tools/build-llama-cpp.sh) and the embedded GGUF:
speculation on equals speculation off (greedy), counters read from real replies, and a short
`specbench run` + `report` with `ar`, `llama.cpp:ar` and `llama.cpp:ngram-mod`. Without a
llama.cpp build these skip, except under CI (env CI set), where they fail.

Also, on the fake server (no llama.cpp needed): a server that dies mid-run leaves an error row
with its last log lines, the run goes on and exits 1, and `--resume --retry-errors` completes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_engine_faults import fake_binary  # tests/servers is on the path (pytest's rootdir-less import)

from specbench_cli.locate import find_llama_cpp
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.servers import registry as engine_methods
from specbench_cli.servers.engine_method import EngineSettings
from specbench_cli.servers.server import request_json

PROMPT = ("<|im_start|>user\nRepeat this list exactly twice, one item per line: apples, pears, plums, cherries, "
          "grapes, lemons, limes, melons.<|im_end|>\n<|im_start|>assistant\n")  # SmolLM2's chat format


@pytest.fixture(scope="module")
def llama_server():
    found = find_llama_cpp()
    if found is None or found.server is None:
        message = "llama-server not found: build it with tools/build-llama-cpp.sh and set SPECBENCH_LLAMA_CPP"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found.server


def engine(name: str, budget: int = 6):
    m = engine_methods.get(name)(MethodContext(budget=budget))
    m.configure(EngineSettings(model="smollm2-135m", timeout=120, threads=1))
    m.settings.vocab_size = 49152
    return m


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specbench_cli", *args], capture_output=True, text=True,
                          timeout=900, env={**os.environ, **(env or {})})


def rows_of(out_dir: Path) -> list[dict]:
    (run,) = [p for p in out_dir.iterdir() if p.is_dir()]
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]


def test_speculation_on_equals_off_and_counters_come_from_the_server(llama_server, tmp_path):
    ar, mod = engine("llama.cpp:ar"), engine("llama.cpp:ngram-mod")
    try:
        ar.ensure_ready(tmp_path)
        ids = request_json(ar.url + "/tokenize", {"content": PROMPT, "add_special": True}, 60)["tokens"]
        want = ar.generate(ids, 96, set(), tmp_path)
        got = mod.generate(ids, 96, set(), tmp_path)
    finally:
        ar.close()
        mod.close()
    assert got.output_ids == want.output_ids and len(want.output_ids) > 8   # greedy: speculation changes nothing
    assert want.stats["spec_decode_num_drafts"] == 0 and set(want.accept_lengths) == {1}
    s = got.stats
    assert s["counters_from"] == "metrics" and s["spec_decode_num_drafts"] > 0, s   # the repeat was drafted
    assert s["timings"]["predicted_n"] == s["generated"] == len(got.output_ids)
    assert s["timings"].get("draft_n", 0) == s["spec_decode_num_draft_tokens"]          # /metrics agrees with timings
    assert s["timings"].get("draft_n_accepted", 0) == s["spec_decode_num_accepted_tokens"]
    assert sum(s["spec_decode_num_accepted_tokens_per_pos"]) == s["spec_decode_num_accepted_tokens"]
    assert sum(got.accept_lengths) == s["generated"] - 1 and max(got.accept_lengths) > 1
    assert sum(got.draft_sizes) == s["spec_decode_num_draft_tokens"]
    assert (tmp_path / "engines" / "llama.cpp-ngram-mod.log").exists()
    assert not ar.server and not mod.server


@pytest.mark.slow
def test_a_run_with_llama_cpp_methods_and_its_report(llama_server, tmp_path):
    out = tmp_path / "runs"
    r = run_cli("run", "--methods", "ar,llama.cpp:ar,llama.cpp:ngram-mod", "--tasks", "mini", "--limit", "1",
                "--categories", "mt_bench,summarization,translation", "--max-new-tokens", "32", "--threads", "1",
                "--output-dir", str(out), "--no-report")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = rows_of(out)
    by = {m: [x for x in rows if x["method"] == m] for m in ("ar", "llama.cpp:ar", "llama.cpp:ngram-mod")}
    n = len(by["ar"])   # one question per category, mt_bench's with two turns
    assert n == 4 and all(len(v) == n and all(x["status"] == "ok" for x in v) for v in by.values()), rows
    assert all(x["ar_match"] for x in by["llama.cpp:ngram-mod"])        # compared with llama.cpp:ar's tokens
    assert all(x["ar_match"] is not None for x in by["llama.cpp:ar"])   # compared with ar's (information)
    assert all(x["method_stats"]["engine"] == "llama.cpp" and x["max_new_tokens"] == 32 for x in by["llama.cpp:ar"])
    from specbench_cli.report.metrics import summarize

    summary = summarize(rows, by=("method_label",), overall=False).set_index("method_label")
    assert summary.loc["llama.cpp:ar", "speedup"] == pytest.approx(1.0)       # its own baseline
    assert summary.loc["llama.cpp:ngram-mod", "n_paired"] == summary.loc["ar", "n_questions"]  # with llama.cpp:ar
    assert summary.loc["llama.cpp:ngram-mod", "mat"] >= 1.0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    assert sorted(p.name for p in (run / "engines").iterdir()) == ["llama.cpp-ar.log", "llama.cpp-ngram-mod.log"]
    report = run_cli("report", str(run))
    assert report.returncode == 0, report.stderr[-2000:]
    text = " ".join((report.stdout + report.stderr).split())
    assert "llama.cpp:ngram-mod" in text and "outputs equal ar's" in text


@pytest.mark.slow
def test_a_server_that_dies_mid_run_leaves_an_error_row_and_the_run_resumes(tmp_path):
    out = tmp_path / "runs"
    args = ("--methods", "ar,llama.cpp:ngram-mod", "--tasks", "mini", "--categories", "qa", "--limit", "2",
            "--max-new-tokens", "8",
            "--threads", "1", "--engine-bin", str(fake_binary(tmp_path)), "--no-report")
    # each fake server's 3rd request is question 2's (the 1st is the warm-up)
    r = run_cli("run", *args, "--output-dir", str(out), env={"FAKE_LLAMA_MODE": "die", "FAKE_LLAMA_AT": "3"})
    assert r.returncode == 1, r.stderr[-3000:]
    rows = rows_of(out)
    errors = [x for x in rows if x["status"] == "error"]
    assert {x["method"] for x in errors} == {"llama.cpp:ar", "llama.cpp:ngram-mod"} and len(errors) == 2
    assert all("fatal: the fake server broke down" in x["error"] for x in errors)
    assert sum(x["status"] == "ok" for x in rows) == 4            # the run went on
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    r = run_cli("run", "--resume", str(run), "--retry-errors", "--no-report", "--engine-bin", str(fake_binary(tmp_path)),
                env={"FAKE_LLAMA_MODE": "ok"})   # a run folder never names the program: the command line does
    assert r.returncode == 0, r.stderr[-3000:]
    assert all(x["status"] == "ok" for x in rows_of(out)) and len(rows_of(out)) == 6
