"""results/reference/msn/msn_tables.py: the quality table from run folders alone."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest


def _module():
    spec = importlib.util.spec_from_file_location(
        "msn_tables", Path(__file__).resolve().parents[2] / "results" / "reference" / "msn" / "msn_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(folder: Path, answers: list[tuple]) -> Path:
    """A run folder whose rows are (method, question_id, scorer, reference, output_text)."""
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"run_id": folder.name, "config": {}, "model": {"name": "m"}}))
    rows = [{"method": m, "method_label": m, "status": "ok", "question_id": q, "turn": 0, "repeat": 0,
             "category": "math_reasoning", "scorer": sc, "reference": ref, "output_text": text,
             "output_ids": [1], "new_tokens": 1, "wall_time": 1.0, "steps": 1, "accept_lengths": [1]}
            for (m, q, sc, ref, text) in answers]
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_mcnemar_exact_p_values():
    mod = _module()
    assert mod.mcnemar_p(0, 0) == 1.0
    assert mod.mcnemar_p(0, 5) == pytest.approx(2 / 32)
    assert mod.mcnemar_p(9, 1) == pytest.approx(2 * (1 + 10) / 1024)
    assert mod.mcnemar_p(3, 3) == 1.0


def test_quality_table_scores_ar_rows_and_pairs_them_with_sft(tmp_path, capsys):
    """Only AR rows count; n, correct, Wilson interval per model; discordant pairs vs sft on the
    questions both answered; HumanEval rows are not run without --execute-code (a note says so)."""
    mod = _module()
    g = "gsm8k"
    sft = _run(tmp_path / "sft", [("ar", "1", g, "#### 5", "so 5"), ("ar", "2", g, "#### 7", "it is 7"),
                                  ("ar", "3", g, "#### 9", "8"), ("jacobi", "3", g, "#### 9", "9")])
    msn = _run(tmp_path / "msn", [("ar", "1", g, "#### 5", "4"), ("ar", "2", g, "#### 7", "7"),
                                  ("ar", "3", g, "#### 9", "9"), ("ar", "4", g, "#### 1", "1"),
                                  ("ar", "HumanEval/0", "humaneval", {"prompt": "", "test": "", "entry_point": "f"},
                                   "def f(): pass")])
    out = tmp_path / "tables"
    assert mod.main(["-o", str(out), "--quality", f"sft={sft}", "--quality", f"msn4={msn}"]) == 0
    text = (out / "quality.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines() if "(gsm8k)" in line}
    assert rows["sft"][2:6] == ["3", "2", "66.7%", "[20.8%, 93.9%]"]
    assert rows["msn4"][2:5] == ["4", "3", "75.0%"]
    # paired on questions 1-3: sft only right on 1, msn4 only right on 3
    assert rows["msn4"][6:9] == ["3", "1", "1"] and rows["msn4"][9].startswith("1.00")
    assert "msn4 humaneval: 1 answers not scored (pass@1 needs --execute-code)" in text
    # a directory of run folders counts every one (more questions as later runs); the same
    # question in two runs of one model is refused, not counted twice
    (tmp_path / "more").mkdir()
    _run(tmp_path / "more" / "r1", [("ar", "1", g, "#### 5", "5"), ("ar", "2", g, "#### 7", "7")])
    _run(tmp_path / "more" / "r2", [("ar", "3", g, "#### 9", "1")])
    assert mod.main(["-o", str(out), "--quality", f"all={tmp_path / 'more'}"]) == 0
    assert "| all | Acc (gsm8k) | 3 | 2 | 66.7% |" in (out / "quality.md").read_text()
    assert mod.main(["-o", str(out), "--quality", f"all={tmp_path}"]) == 2
    assert "question 1 (turn 0) is in two of its runs" in capsys.readouterr().err
    assert mod.main(["-o", str(out), "--quality", f"sft={tmp_path / 'missing'}"]) == 2
    assert "error:" in capsys.readouterr().err
