"""results/reference/ci-gate/gate_study.py on synthetic A/A pairs: the rates it reports follow the
noise and the slowdown it is given (the real pairs are made by that folder's reproduce.sh)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

from helpers.rows import synthetic_rows, write_run


def _module():
    spec = importlib.util.spec_from_file_location(
        "gate_study", Path(__file__).resolve().parents[2] / "results" / "reference" / "ci-gate" / "gate_study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pairs(root: Path, n: int, spread: float, per_category: int = 10) -> Path:
    """n A/A pairs: the same answers, every wall time jittered by up to ±spread per run."""
    rows = synthetic_rows(seed=1, methods=("pld",), questions_per_category=per_category, turns=1)
    for i in range(n):
        for side in ("a", "b"):
            rng = random.Random(f"{i}{side}")
            jittered = [{**r, "wall_time": r["wall_time"] * rng.uniform(1 - spread, 1 + spread)} for r in rows]
            write_run(root / f"pair-{i:02d}" / side / f"run-{i}{side}", jittered)
    return root


def test_first_questions_are_the_ones_a_smaller_limit_selects():
    study = _module()
    rows = synthetic_rows(seed=2, methods=("pld",), questions_per_category=4, turns=1)
    kept = study.first_questions(rows, 2)
    by_category: dict[str, set] = {}
    for r in kept:
        by_category.setdefault(r["category"], set()).add(r["question_id"])
    assert all(len(ids) == 2 for ids in by_category.values()) and len(by_category) == 6
    assert by_category["qa"] == {"300", "301"}  # the first two qa questions in run order
    slow = study.slowed(rows, 0.1)
    assert all(s["wall_time"] == (r["wall_time"] / 0.9 if r["method"] != "ar" else r["wall_time"])
               for r, s in zip(rows, slow))


def test_quiet_pairs_raise_no_alarm_and_catch_every_slowdown(tmp_path):
    study = _module()
    result = study.study(study.find_pairs(_pairs(tmp_path, 6, spread=0.02)), [18, 60], resamples=1000)
    for size in ("18", "60"):
        rates = result["sizes"][size]["rates"]["pld"]
        assert rates["pairs"] == 6 and rates["false_alarms"] == 0 and rates["detected"] == 6
        assert rates["accept_identical"] == 6
        assert result["sizes"][size]["pairs"][0]["questions"] == int(size)
    narrow, wide = (result["sizes"][s]["rates"]["pld"]["aa_width_median"] for s in ("18", "60"))
    assert wide < narrow  # more questions, a narrower interval
    assert "| 18 | pld | 6 | 0 |" in study.markdown(result)


def test_noisy_pairs_detect_less(tmp_path):
    study = _module()
    quiet = study.study(study.find_pairs(_pairs(tmp_path / "q", 6, spread=0.02)), [18], resamples=1000)
    noisy = study.study(study.find_pairs(_pairs(tmp_path / "n", 6, spread=0.5)), [18], resamples=1000)
    assert noisy["sizes"]["18"]["rates"]["pld"]["detected"] < quiet["sizes"]["18"]["rates"]["pld"]["detected"]
    assert study.wilson(0, 20)[0] == 0 and 0.1 < study.wilson(0, 20)[1] < 0.2
