"""`specbench load` with methods specbench decodes itself (the own loop serving arrivals,
specbench_cli/load/own_loop.py) on the tiny test model: the same folder and pairing as the engine
backends, `ar` first. Skipped where the own loop's backend is not part of this checkout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.cli import cli  # noqa: E402


def test_own_loop_methods_replay_the_same_trace_as_ar(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("specbench_cli.load.own_loop")
    out = tmp_path / "out"
    code, _, err = cli(["load", "--model", str(tiny_model_dir), "--methods", "ar,pld", "--categories", "qa",
                        "--limit", "2", "--max-new-tokens", "8", "--num-prompts", "3", "--concurrency", "1,2",
                        "--threads", "1", "--output-dir", str(out)], capsys)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["methods"] == ["ar", "pld"] and manifest["baselines"] == {"ar": "", "pld": "ar"}
    for point in ("c1", "c2"):
        ar = {r["index"]: r for r in map(json.loads, (out / "load" / point / "ar.jsonl").read_text().splitlines())}
        pld = {r["index"]: r for r in map(json.loads, (out / "load" / point / "pld.jsonl").read_text().splitlines())}
        assert sorted(ar) == sorted(pld) == [0, 1, 2]
        assert all(pld[i]["output_ids"] == ar[i]["output_ids"] and pld[i]["question_id"] == ar[i]["question_id"]
                   for i in ar)
