"""`specbench load` against a real `llama-server` (tools/build-llama-cpp.sh) with 4 slots, at
concurrency 1 and 4: the embedded model de-quantised to a float32 GGUF (on the quantised one
llama.cpp's batched verification can flip a near-tied greedy token), a handful of requests of 16
tokens, `llama.cpp:ar` against `llama.cpp:ngram-mod`. Greedy outputs with speculation equal the
same requests' without (paired by index), and every per-request number comes from the server's
real replies. Without a llama.cpp build this skips, except under CI (env CI set), where it fails."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.cli import cli  # noqa: E402
from helpers.embedded import needs_model  # noqa: E402

from specbench_cli.locate import find_llama_cpp  # noqa: E402

QUESTIONS = "g1,g2,s2,t2"   # RAG, summarisation and translation: answers that copy their prompt, so n-grams draft


@pytest.fixture(scope="module")
def llama_server():
    found = find_llama_cpp()
    if found is None or found.server is None:
        message = "llama-server not found: build it with tools/build-llama-cpp.sh and set SPECBENCH_LLAMA_CPP"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found.server


@pytest.fixture(scope="module")
def f32_gguf(tmp_path_factory):
    from specbench_cli.models.gguf_f32 import float32_copy
    from specbench_cli.models.load import resolve

    path = tmp_path_factory.mktemp("f32") / "smollm2-135m-f32.gguf"
    float32_copy(resolve("smollm2-135m")[1], str(path))
    return path


@needs_model
def test_speculation_under_load_equals_no_speculation_on_a_real_server(llama_server, f32_gguf, tmp_path, capsys):
    out = tmp_path / "load"
    code, _, err = cli(["load", "--model", str(f32_gguf), "--methods", "llama.cpp:ar,llama.cpp:ngram-mod",
                        "--question-ids", QUESTIONS, "--concurrency", "1,4", "--max-new-tokens", "16",
                        "--threads", "1", "--warmup", "0", "--output-dir", str(out)], capsys)
    assert code == 0, err
    log = (out / "engines" / "llama.cpp-ngram-mod.log").read_text()
    assert "-np 4" in log and "n_slots = 4" in log                     # one server, four slots
    accepted = 0
    for point in ("c1", "c4"):
        def rows(name: str) -> dict[int, dict]:
            path = out / "load" / point / f"{name}.jsonl"
            return {r["index"]: r for r in map(json.loads, path.read_text().splitlines())}

        ar, mod = rows("llama.cpp-ar"), rows("llama.cpp-ngram-mod")
        assert sorted(ar) == sorted(mod) == [0, 1, 2, 3]
        for i, r in mod.items():
            base = ar[i]
            assert r["error"] is None and base["error"] is None, (r["error"], base["error"])
            assert r["question_id"] == base["question_id"]
            assert r["output_ids"] == base["output_ids"], (point, i)         # greedy: speculation changes nothing
            for x in (r, base):
                assert x["new_tokens"] == len(x["output_ids"]) == 16 or x["output_ids"][-1] in (2, 0)   # 16 unless EOS
                assert x["send_s"] <= x["first_token_s"] <= x["end_s"]
                assert x["token_times_s"] == sorted(x["token_times_s"]) and len(x["token_times_s"]) == x["new_tokens"]
                assert x["token_times_s"][0] == x["first_token_s"] and x["extra"]["timings"]["predicted_n"] == 16
            assert base["drafted"] == 0 and r["drafted"] >= r["accepted"] >= 0
            accepted += r["accepted"]
            if point == "c1":   # one request in flight: the steps from /metrics, as `run` derives them
                assert r["acceptance_source"] == "metrics-delta"
                assert sum(r["accept_lengths"]) == r["new_tokens"] - 1 and r["steps"] == len(r["accept_lengths"])
            else:
                assert r["acceptance_source"] == "reply" and r["steps"] is None
        if point == "c4":       # four in flight: requests overlapped
            spans = sorted((x["send_s"], x["end_s"]) for x in ar.values())
            assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
    assert accepted > 0                                                 # speculation did draft and accept
