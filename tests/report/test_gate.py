"""The statistical gate of `specbench check` (report/gate.py): the paired bootstrap interval, the
verdicts, the exact accepted-length comparison, baselines that store them, and older baselines."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from helpers.rows import synthetic_rows, write_run
from typer.testing import CliRunner

from specbench_cli.report import gate


def noisy(rows: list[dict], seed: int, spread: float = 0.06, method_factor: float = 1.0, method: str = "pld"):
    """The same answers timed again: every wall time jitters by up to ±spread; `method`'s also
    scaled by `method_factor` (1 / 0.9 = a 10 % slower method)."""
    rng = random.Random(seed)
    out = []
    for row in rows:
        factor = rng.uniform(1 - spread, 1 + spread) * (method_factor if row["method"] == method else 1.0)
        out.append({**row, "wall_time": row["wall_time"] * factor})
    return out


def test_bootstrap_interval_is_seeded_paired_and_covers_the_point():
    rng = np.random.default_rng(1)
    base = rng.uniform(1.4, 1.8, size=30)
    now = base * rng.uniform(0.95, 1.05, size=30)
    change, low, high = gate.bootstrap_change(base, now, resamples=2000, seed=7)
    assert low <= change <= high and high - low < 0.05
    assert gate.bootstrap_change(base, now, resamples=2000, seed=7) == (change, low, high)  # same seed, same interval
    assert gate.bootstrap_change(base, now, resamples=2000, seed=8) != (change, low, high)
    # paired: a common factor moves every pair alike, so the interval is that factor exactly
    assert gate.bootstrap_change(base, base * 0.9, resamples=500) == pytest.approx((-0.1, -0.1, -0.1))
    with pytest.raises(ValueError):
        gate.bootstrap_change([1.0, 2.0], [1.0])


def test_records_hold_the_paired_ratio_and_accepted_lengths_of_every_drafting_question():
    rows = synthetic_rows(seed=1, methods=("pld",), questions_per_category=1)
    records = gate.question_records(rows)
    assert {r["method_label"] for r in records} == {"pld"} and len(records) == 6
    mt = next(r for r in records if r["category"] == "mt_bench")
    pld = [r for r in rows if r["method"] == "pld" and r["question_id"] == mt["question_id"]]
    ar = [r for r in rows if r["method"] == "ar" and r["question_id"] == mt["question_id"]]
    tput = sum(r["new_tokens"] for r in pld) / sum(r["wall_time"] for r in pld)
    ar_tput = sum(r["new_tokens"] for r in ar) / sum(r["wall_time"] for r in ar)
    assert mt["ratio"] == pytest.approx(tput / ar_tput)
    assert mt["accept_lengths"] == [r["accept_lengths"] for r in sorted(pld, key=lambda r: r["turn"])]


def test_verdicts_fail_a_real_slowdown_and_pass_noise():
    rows = synthetic_rows(seed=4, methods=("pld", "sps"), questions_per_category=5)
    base = gate.question_records(rows)
    same = gate.judge_speed(base, gate.question_records(noisy(rows, 1)), resamples=2000)
    assert [v.verdict for v in same] == ["ok", "ok"] and all(v.n == 30 for v in same)
    slow = {v.key[1]: v for v in gate.judge_speed(base, gate.question_records(noisy(rows, 2, method_factor=1 / 0.8)),
                                                  resamples=2000)}
    assert slow["pld"].verdict == "slower" and slow["pld"].high < -0.05
    assert slow["sps(k=4)"].verdict == "ok"
    assert slow["pld"].change == pytest.approx(-0.2, abs=0.03)
    # a 2 % slowdown is inside the 5 % tolerance: not a failure, whatever the interval
    small = gate.judge_speed(base, gate.question_records(noisy(rows, 3, spread=0.0, method_factor=1 / 0.98)),
                             resamples=500)
    assert {v.verdict for v in small} == {"ok"}


def test_the_first_question_whose_accepted_lengths_changed_is_named():
    rows = synthetic_rows(seed=5, methods=("pld",), questions_per_category=2)
    base = gate.question_records(rows)
    assert gate.accept_changes(base, base) == []
    changed = [dict(r) for r in rows]
    targets = [r for r in changed if r["method"] == "pld" and r["category"] in ("qa", "rag")]
    for row in targets:  # four questions change (two per category); qa comes first in the baseline
        row["accept_lengths"] = row["accept_lengths"][:2] + [row["accept_lengths"][2] + 1] + row["accept_lengths"][3:]
    (found,) = gate.accept_changes(base, gate.question_records(changed))
    assert found.question["category"] == "qa" and found.turn == 0 and found.step == 2
    assert (found.changed, found.compared) == (4, 12)
    assert found.mat_now > found.mat_base
    assert "qa/" in gate.accept_change_line(found) and "4 of 12 questions changed" in gate.accept_change_line(found)


# ----------------------------------------------------------------------------- through `specbench check`


def _cli(*args) -> tuple[int, str]:
    """(exit code, output with every run of whitespace made one space: rich wraps at 80 columns)."""
    from specbench_cli.cli.main import app
    from specbench_cli.errors import SpecBenchError

    result = CliRunner().invoke(app, [str(a) for a in args])
    if isinstance(result.exception, SpecBenchError):
        return result.exception.exit_code, " ".join(f"{result.output}{result.exception}".split())
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def runs(tmp_path):
    rows = synthetic_rows(seed=6, methods=("pld",), questions_per_category=3)
    baseline_run = write_run(tmp_path / "a", rows)
    code, output = _cli("baseline", baseline_run, "-o", tmp_path / "base.json")
    assert code == 0, output
    return rows, tmp_path


def test_baseline_stores_the_gate_data(runs):
    rows, tmp = runs
    doc = json.loads((tmp / "base.json").read_text())
    assert doc["version"] == 2 and doc["threads"] == 4
    assert len(doc["questions"]) == 18 and all(q["ratio"] > 0 for q in doc["questions"])


def test_check_passes_timing_noise_and_fails_a_slowdown(runs):
    rows, tmp = runs
    code, output = _cli("check", write_run(tmp / "again", noisy(rows, 11)), "-b", tmp / "base.json")
    assert code == 0 and "within tolerance" in output and "95% bootstrap" in output
    code, output = _cli("check", write_run(tmp / "slow", noisy(rows, 12, method_factor=1.3)), "-b", tmp / "base.json")
    assert code == 1 and "FAIL pld (BC 8) is slower" in output


def test_check_names_the_question_whose_accepted_lengths_changed(runs):
    rows, tmp = runs
    changed = [dict(r) for r in rows]
    row = next(r for r in changed if r["method"] == "pld" and r["category"] == "summarization")
    before = row["accept_lengths"]
    row["accept_lengths"] = list(reversed(before))  # same #MAT, other steps
    step = next(i for i, (a, b) in enumerate(zip(before, row["accept_lengths"])) if a != b)
    code, output = _cli("check", write_run(tmp / "changed", changed), "-b", tmp / "base.json")
    assert code == 1
    assert f"question summarization/{row['question_id']}, turn 0, step {step}" in output


def test_accepted_lengths_are_compared_exactly_only_for_greedy_float32_at_the_same_threads(runs):
    rows, tmp = runs
    changed = [dict(r) for r in rows]
    row = next(r for r in changed if r["method"] == "pld")
    row["accept_lengths"] = list(reversed(row["accept_lengths"]))
    run = write_run(tmp / "threads", changed)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["threads"] = 2
    (run / "manifest.json").write_text(json.dumps(manifest))
    code, output = _cli("check", run, "-b", tmp / "base.json")
    assert code == 0 and "not compared exactly: the baseline was made with 4 thread(s), the run with 2" in output


def test_an_older_baseline_is_read_with_the_point_rule_and_says_so(runs):
    rows, tmp = runs
    doc = json.loads((tmp / "base.json").read_text())
    for key in ("questions", "threads"):
        del doc[key]
    doc["version"] = 1
    (tmp / "old.json").write_text(json.dumps(doc))
    code, output = _cli("check", write_run(tmp / "again", noisy(rows, 13)), "-b", tmp / "old.json")
    assert code == 0 and "holds no per-question data" in output and "-25% allowed" in output
    code, output = _cli("check", write_run(tmp / "slow", noisy(rows, 14, spread=0, method_factor=1.5)),
                        "-b", tmp / "old.json")
    assert code == 1 and "speedup -33.3%" in output


@pytest.mark.parametrize("args, message", [
    (["--confidence", "1"], "--confidence must be between 0 and 1"),
    (["--resamples", "10"], "--resamples must be at least 100"),
    (["--seed", "-1"], "--seed must be >= 0"),
    (["--speedup-tol", "nan"], "--speedup-tol must be a finite number"),
])
def test_bad_gate_options_exit_2(runs, args, message):
    _, tmp = runs
    code, output = _cli("check", tmp / "a", "-b", tmp / "base.json", *args)
    assert code == 2 and message in output


@pytest.mark.parametrize("damage, message", [
    (lambda d: d.update(questions="all"), "'questions' must be a list"),
    (lambda d: d["questions"][0].update(ratio="fast"), "question record 0: 'ratio' must be a number > 0"),
    (lambda d: d["questions"][1].update(accept_lengths=[[1, "2"]]), "'accept_lengths' must be a list of lists"),
    (lambda d: d["questions"][2].pop("question_id"), "question record 2 lacks 'question_id'"),
    (lambda d: d.update(threads="two"), "'threads' must be an integer >= 1 or null"),
    (lambda d: d.update(threads=-1), "'threads' must be an integer >= 1 or null, got -1"),
    (lambda d: d.update(version=99), "'version' must be an integer from 1 to 2"),
    (lambda d: d.update(version="2"), "'version' must be an integer from 1 to 2"),
    (lambda d: d.update(runs="a"), "'runs' must be a list of run ids"),
    (lambda d: d["entries"][0].update(speedup=-1.5), "entry 0: 'speedup' must be a finite number > 0 or null"),
    (lambda d: d["entries"][0].update(mat=0), "entry 0: 'mat' must be a finite number > 0 or null"),
    (lambda d: d["entries"][0].update(n=-3), "entry 0: 'n' must be an integer >= 0"),
    (lambda d: d["questions"][0].update(ratio=-2.0), "question record 0: 'ratio' must be a number > 0"),
    (lambda d: d["questions"][0].update(accept_lengths=[[-1]]), "'accept_lengths' must be a list of lists"),
    (lambda d: d.update(questions=[]), "no question record holds a speedup over AR ('questions' is empty"),
    (lambda d: [q.update(ratio=None) for q in d["questions"]], "no question record holds a speedup over AR"),
    (lambda d: d.pop("questions"), "a version 2 baseline must hold 'questions'"),
])
def test_damaged_gate_data_is_one_line_exit_2(runs, damage, message):
    _, tmp = runs
    doc = json.loads((tmp / "base.json").read_text())
    damage(doc)
    (tmp / "bad.json").write_text(json.dumps(doc))
    code, output = _cli("check", tmp / "a", "-b", tmp / "bad.json")
    assert code == 2 and message in output


def _one_line(output: str) -> str:
    """`_cli` gives a UsageError as its message alone: nothing else may have been printed."""
    assert "Traceback" not in output and "within tolerance" not in output and "wrote" not in output, output
    return output


def test_check_fails_when_the_baselines_questions_do_not_pair_with_the_run(runs):
    """Other question ids: no baseline question has a speedup in the run, so none is compared;
    the gate exits 2 saying how many pair and naming which do not, instead of passing."""
    rows, tmp = runs
    other = [{**r, "question_id": f"x{r['question_id']}"} for r in rows]
    code, output = _cli("check", write_run(tmp / "other", other), "-b", tmp / "base.json")
    assert code == 2 and "only 0 of the baseline's 18 questions pair with the run" in _one_line(output)
    assert "pld (BC 8) mt_bench/x" not in output and "pld (BC 8) mt_bench/" in output and "and 13 more" in output


def test_check_fails_when_the_runs_ar_rows_failed_for_some_questions(runs):
    rows, tmp = runs
    broken = [dict(r) for r in rows]
    for r in broken:
        if r["method"] == "ar" and r["category"] == "qa":
            r.update(status="error", error="RuntimeError: boom")
    code, output = _cli("check", write_run(tmp / "ar_failed", broken), "-b", tmp / "base.json")
    assert code == 2 and "only 15 of the baseline's 18 questions pair with the run" in _one_line(output)
    assert "pld (BC 8) qa/" in output


def test_check_fails_when_a_method_with_a_speedup_has_no_question_records(runs):
    rows, tmp = runs
    doc = json.loads((tmp / "base.json").read_text())
    doc["questions"] = [dict(q, method_label="other") for q in doc["questions"]]
    (tmp / "moved.json").write_text(json.dumps(doc))
    code, output = _cli("check", tmp / "a", "-b", tmp / "moved.json")
    assert code == 2 and "no per-question records for pld (BC 8)" in _one_line(output)


@pytest.mark.parametrize("fail", ["ar", "all"])
def test_baseline_refuses_a_run_without_a_speedup(tmp_path, fail):
    """A baseline of a run whose AR rows (or all rows) failed was written with exit 0; the check
    against it then compared no speed. Now `baseline` refuses it and writes nothing."""
    rows = synthetic_rows(seed=6, methods=("pld",), questions_per_category=1)
    for r in rows:
        if fail == "all" or r["method"] == "ar":
            r.update(status="error", error="RuntimeError: boom")
    code, output = _cli("baseline", write_run(tmp_path / "run", rows), "-o", tmp_path / "b.json")
    assert code == 2 and "has no successful AR row, so no speedup exists" in _one_line(output)
    assert not (tmp_path / "b.json").exists()


def test_baseline_refuses_a_run_where_no_method_succeeded_beside_ar(tmp_path):
    rows = synthetic_rows(seed=6, methods=("pld",), questions_per_category=1)
    for r in rows:
        if r["method"] == "pld":
            r.update(status="error", error="RuntimeError: boom")
    code, output = _cli("baseline", write_run(tmp_path / "run", rows), "-o", tmp_path / "b.json")
    assert code == 2 and "has no question with a measured speedup over AR" in _one_line(output)
