"""`--block-complexity auto` and per-method budgets: the choice as a pure function of t(q) and
acceptance, instance names, bad input, the manifest's cost curve, and an end-to-end tiny run."""

from __future__ import annotations

import json

import pytest
from helpers.cli import cli

from specbench_cli.config.instance import parse_instance
from specbench_cli.run.auto import bcauto
from specbench_cli.run.auto import cost as costmod


def profile(budget: int, accept: list[int], q: list[int], draft_ms: float = 0.0) -> bcauto.Profile:
    return bcauto.Profile(budget=budget, accept_lengths=accept, budget_used=q, draft_ms=[draft_ms] * len(accept))


# A CPU-like curve (t(10) = 2 t(1)) and a GPU-like one (flat up to 32 tokens).
def cpu(q: int) -> float:
    return 40.0 + 4.4 * (q - 1)


def gpu(q: int) -> float:
    return 20.0 + 0.01 * q


# Acceptance that grows with the budget but saturates: 1.5 tokens per step at BC 2, 2.5 at 10, 2.6 at 24.
PROFILES = [profile(2, [2, 1] * 10, [2] * 20), profile(10, [3, 2] * 10, [10] * 20),
            profile(24, [3, 2, 3, 2, 3] * 4, [24] * 20)]


def test_prediction_is_tokens_over_forward_and_drafting_time():
    p = profile(4, [3, 1], [4, 4], draft_ms=5.0)
    p.overhead_ms = 2.0
    expected = 1000 * 4 / (2 * cpu(4) + 2 * 5.0 + 2.0)
    assert bcauto.predicted_tokens_per_s(p, cpu) == pytest.approx(expected)
    assert bcauto.predicted_tokens_per_s(bcauto.Profile(budget=4), cpu) == 0.0


def test_steep_cost_curve_picks_a_small_budget_flat_one_a_large_budget():
    best_cpu, pred_cpu = bcauto.choose_budget(PROFILES, cpu)
    best_gpu, pred_gpu = bcauto.choose_budget(PROFILES, gpu)
    assert best_cpu == 2 and pred_cpu[2] > pred_cpu[10] > pred_cpu[24]
    assert best_gpu == 24 and pred_gpu[24] > pred_gpu[10] > pred_gpu[2]


def test_the_best_budget_follows_the_batch_size():
    """At N sequences per forward every step pays t(N, q) once and N drafters: on a curve that is
    nearly flat in q at N = 1 but steep at N = 8 (N x q rows make the forward compute-bound) the
    best budget shrinks with N; the prediction is tokens summed over the batch."""
    t1 = lambda q: 40.0 + 1.0 * q  # noqa: E731
    t8 = lambda q: 40.0 + 40.0 * q  # noqa: E731
    ar, small, big = profile(1, [1] * 20, [1] * 20), profile(2, [2] * 20, [2] * 20), \
        profile(10, [3] * 20, [10] * 20, draft_ms=1.0)
    assert bcauto.choose_budget([ar, small, big], t1)[0] == 10
    best, pred = bcauto.choose_budget([ar, small, big], t8, batch_size=8)
    assert best == 2 and pred[10] < pred[1] < pred[2]
    assert pred[10] == pytest.approx(1000 * 8 * 60 / (20 * t8(10) + 8 * 20 * 1.0))


def test_drafting_cost_counts_against_a_budget():
    # the same acceptance and forward cost, but BC 10's drafter spends 100 ms a step
    cheap, costly = profile(4, [2] * 10, [4] * 10), profile(10, [2] * 10, [10] * 10, draft_ms=100.0)
    assert bcauto.choose_budget([costly, cheap], gpu)[0] == 4


def test_a_drafting_budget_must_beat_bc_1_by_the_margin():
    # flat curve: BC 4 sends 4 tokens for the cost of one; accepting 3 % / 10 % more than AR per step
    ar = profile(1, [1] * 100, [1] * 100)
    small, clear = profile(4, [1] * 97 + [2] * 3, [4] * 100), profile(4, [1] * 90 + [2] * 10, [4] * 100)
    flat = lambda q: 20.0  # noqa: E731
    best, pred = bcauto.choose_budget([ar, small], flat)
    assert pred[4] > pred[1] and pred[4] < pred[1] * (1 + bcauto.MIN_GAIN) and best == 1
    assert bcauto.choose_budget([ar, clear], flat)[0] == 4
    assert bcauto.choose_budget([small], flat)[0] == 4  # without BC 1 among the candidates: the best


def test_ties_go_to_the_smaller_budget_and_measured_q_not_the_budget_is_charged():
    # pld caps its draft: at BC 24 it still sends 11 tokens, so it costs what BC 11 costs
    a, b = profile(11, [4] * 5, [11] * 5), profile(24, [4] * 5, [11] * 5)
    best, pred = bcauto.choose_budget([b, a], cpu)
    assert pred[11] == pred[24] and best == 11
    with pytest.raises(ValueError):
        bcauto.choose_budget([], cpu)


def test_a_disturbed_curve_point_is_replaced_by_the_next_larger_q():
    t = bcauto.monotone([10.0, 30.0, 12.0, 15.0])  # q=2 was timed while something else ran
    assert [t(q) for q in (1, 2, 3, 4)] == [10.0, 12.0, 12.0, 15.0] and t(6) == 21.0


@pytest.mark.parametrize("spec,parsed", [("pld", ("pld", None)), ("pld@auto", ("pld", "auto")),
                                         ("lookahead@16", ("lookahead", 16))])
def test_instance_specs(spec, parsed):
    assert (parse_instance(spec).name, parse_instance(spec).budget) == parsed


def test_instance_budget_and_label():
    pld, pld6, pld_auto, ar = (parse_instance(s) for s in ("pld", "pld@6", "pld@auto", "ar"))
    assert pld.budget_in("auto") == "auto" and pld6.budget_in("auto") == 6
    assert pld_auto.budget_in(10) == "auto" and ar.budget_in("auto") == 1
    assert pld_auto.row_label("pld(max_ngram=4)") == "pld(max_ngram=4)@auto"
    assert pld.row_label("pld") == "pld" and pld.row_label("pld", "auto") == "pld@auto"
    assert ar.row_label("ar", "auto") == "ar" and pld6.row_label("pld", "auto") == "pld@6"


def test_auto_needs_calibration_questions_outside_the_reported_ones(capsys, monkeypatch):
    import specbench_cli.models.load as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("model loaded before validation"))
    code, _, err = cli(["run", "--bc", "auto", "--tasks", "mini"], capsys)  # all 18 mini questions reported
    assert code == 2 and "reports all of its suite's and all of mini's" in " ".join(err.split())


def test_calibration_takes_the_runs_own_suite_first_then_mini():
    from specbench_cli.config import RunConfig, TaskSection
    from specbench_cli.run.auto.calibrate import calibration_questions
    from specbench_cli.run.plan import load_questions

    cfg = RunConfig(task=TaskSection(tasks=["mini"], categories=["qa"], limit=1))
    reported = load_questions(cfg)
    cal = calibration_questions(cfg, reported, 4)
    ids = [(q.task, q.id) for q in cal]
    assert len(ids) == 4 == len(set(ids)) and not set(ids) & {(q.task, q.id) for q in reported}
    assert [q.category for q in cal[:2]] == ["qa", "qa"]  # the suite's held-out qa questions first
    assert {q.category for q in cal[2:]} <= {q.category for q in load_questions(RunConfig(task=TaskSection(tasks=["mini"])))} - {"qa"}


@pytest.mark.parametrize("args,message", [
    (["run", "--bc", "fast"], "--block-complexity must be a whole number, 'auto' or 'adaptive'"),
    (["run", "--methods", "pld@0"], "the BC after '@' must be between 1 and 4096"),
    (["run", "--methods", "pld@x"], "the BC after '@' must be a whole number, 'auto' or 'adaptive'"),
    (["run", "--methods", "ar@auto"], "ar ignores the block complexity"),
    (["run", "--methods", "pldd@auto"], "unknown method 'pldd'"),
    (["run", "--bc", "auto", "--auto-candidates", "0,4"], "--auto-candidates must be between 1 and 4096"),
    (["run", "--bc", "auto", "--auto-questions", "0"], "--auto-questions must be between 1 and 10000"),
    (["run", "--bc", "auto", "--auto-tokens", "0"], "--auto-tokens must be between 1 and 1000000"),
    (["run", "--methods", "lookahead@auto", "--auto-candidates", "1", "-o", "lookahead.W=4"],
     "lookahead@auto: none of the auto candidates [1] fits"),
])
def test_bad_auto_input_exits_2_before_loading(args, message, capsys, monkeypatch):
    import specbench_cli.models.load as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("model loaded before validation"))
    code, _, err = cli(args, capsys)
    assert code == 2 and message in " ".join(err.split()), err


def run_args(model_dir, out_dir, methods, *extra):
    return ["run", "--model", str(model_dir), "--methods", methods, "--tasks", "mini", "--limit", "1",
            "--categories", "qa,math_reasoning", "--max-new-tokens", "12", "--output-dir", str(out_dir),
            "--threads", "1", *extra]


def only_run(out_dir):
    (run,) = [p for p in out_dir.iterdir() if p.is_dir()]
    manifest = json.loads((run / "manifest.json").read_text())
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    return run, manifest, rows


def test_fixed_bc_run_measures_a_curve_only_when_none_is_cached(tiny_model_dir, isolated_cache, tmp_path, capsys):
    code, _, err = cli(run_args(tiny_model_dir, tmp_path / "a", "ar,pld", "--no-report"), capsys)
    assert code == 0, err
    recorded = only_run(tmp_path / "a")[1]["cost_curve"]
    bc = only_run(tmp_path / "a")[1]["config"]["block_complexity"]
    assert recorded["source"] == "measured" and len(recorded["ms"]) == bc  # up to the run's largest budget
    assert len(list((isolated_cache / "cost").glob("*.json"))) == 1


def test_a_curve_measured_on_a_busy_machine_is_used_but_not_cached(tiny_model_dir, isolated_cache, tmp_path,
                                                                   capsys, monkeypatch):
    monkeypatch.setattr("specbench_cli.run.auto.calibrate.load_average", lambda: [9.0, 9.0, 9.0])
    code, _, err = cli(run_args(tiny_model_dir, tmp_path / "a", "ar,pld", "--no-report"), capsys)
    assert code == 0, err
    assert only_run(tmp_path / "a")[1]["cost_curve"]["source"] == "measured (busy, not cached)"
    assert "busy" in err and not list((isolated_cache / "cost").glob("*.json"))


def test_fixed_bc_run_records_the_cached_curve_and_never_measures(tiny_model_dir, isolated_cache, tmp_path, capsys,
                                                                 monkeypatch):
    code, _, err = cli(["cost", "--model", str(tiny_model_dir), "--max-q", "3", "--repeats", "1", "--warmup", "0",
                        "--threads", "1", "--plot", str(tmp_path / "c.png")], capsys)
    assert code == 0, err
    (cached,) = (isolated_cache / "cost").glob("*.json")
    monkeypatch.setattr(costmod, "measure_curve", lambda *a, **k: pytest.fail("a fixed-BC run measured t(q)"))
    code, _, err = cli(run_args(tiny_model_dir, tmp_path / "b", "ar,pld", "--no-report"), capsys)
    assert code == 0, err
    recorded = only_run(tmp_path / "b")[1]["cost_curve"]
    assert recorded["source"] == "cache" and recorded["cache_file"] == cached.name
    assert recorded["ms"] == json.loads(cached.read_text())["ms"] and recorded["key"]["threads"] == 1


AUTO_METHODS = "ar,pld,pld@auto,lookahead@auto,tr-jacobi@auto,mask-probe@auto,jacobi@auto"


def test_auto_run_end_to_end_on_the_tiny_model(tiny_model_dir, isolated_cache, tmp_path, capsys, monkeypatch):
    from specbench_cli.run.auto import calibrate as bcauto_run

    out_dir = tmp_path / "out"
    args = run_args(tiny_model_dir, out_dir, AUTO_METHODS, "--auto-candidates", "2,4", "--auto-questions", "1",
                    "--auto-tokens", "5")
    code, out, err = cli(args, capsys)
    assert code == 0, err
    run, manifest, rows = only_run(out_dir)
    assert manifest["cost_curve"]["source"] == "measured" and len(manifest["cost_curve"]["ms"]) == 4
    choices = manifest["bc_auto"]
    reported = {f"{r['task']}/{r['question_id']}" for r in rows}
    assert set(choices) == {s for s in AUTO_METHODS.split(",") if s.endswith("@auto")}
    for spec, record in choices.items():
        assert record["chosen"] in (2, 4) and len(record["questions"]) == 1 and record["max_new_tokens"] == 5
        assert record["questions"][0].startswith("mini/") and record["questions"][0] not in reported
        assert set(record["candidates"]) <= {"2", "4"} and str(record["chosen"]) in record["candidates"]
        mine = [r for r in rows if r["method"] == spec]
        assert mine and all(r["block_complexity"] == record["chosen"] for r in mine)
        assert all(r["method_label"].endswith("@auto") and max(r["budget_used"]) <= record["chosen"] for r in mine)
        assert manifest["methods"][spec]["block_complexity"] == record["chosen"]
    assert {r["block_complexity"] for r in rows if r["method"] == "pld"} == {10}
    assert all(r["ar_match"] for r in rows if r["method"] != "ar")  # lossless at the chosen budgets too
    assert "pld@auto" in out and "BC" in out  # the table shows each instance's chosen budget

    # resume reuses the recorded choices: no calibration, the same budgets
    samples = run / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join(lines[: len(lines) // 2]))
    monkeypatch.setattr(bcauto_run, "calibrate", lambda *a, **k: pytest.fail("recalibrated on resume"))
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 0, err
    _, _, resumed = only_run(out_dir)
    assert len(resumed) == len(rows)
    for spec, record in choices.items():
        assert {r["block_complexity"] for r in resumed if r["method"] == spec} == {record["chosen"]}


def test_sweep_grid_takes_auto_as_a_budget(tmp_path):
    from helpers.sweep import write_grid

    from specbench_cli.sweep.grid import expand, load_grid
    from specbench_cli.sweep.questions import selector

    grid = load_grid(write_grid(tmp_path, 'methods = ["pld"]\nbcs = [10, "auto"]\ncategories = ["qa"]\n'))
    jobs = expand(grid, selector(grid))
    assert sorted(j.args[j.args.index("--block-complexity") + 1] for j in jobs) == ["10", "auto"]
    assert len({j.id for j in jobs}) == 2


def test_auto_at_a_batch_size_uses_the_batch_curve(tiny_model_dir, isolated_cache, tmp_path, capsys):
    out_dir = tmp_path / "out"
    args = run_args(tiny_model_dir, out_dir, "ar,pld@auto", "--auto-candidates", "1,3", "--auto-questions", "1",
                    "--auto-tokens", "4", "--batch-size", "2")
    code, _, err = cli(args, capsys)
    assert code == 0, err
    _, manifest, rows = only_run(out_dir)
    assert manifest["cost_curve"]["key"]["batch_size"] == 2 and len(manifest["cost_curve"]["ms"]) == 3
    record = manifest["bc_auto"]["pld@auto"]
    assert record["batch_size"] == 2 and record["chosen"] in (1, 3)
    assert {r["block_complexity"] for r in rows if r["method"] == "pld@auto"} == {record["chosen"]}
    assert {r["batch_size"] for r in rows} == {2}


def test_adaptive_run_end_to_end_on_the_tiny_model(tiny_model_dir, isolated_cache, tmp_path, capsys):
    """`NAME@adaptive` through the command line: calibrated at the ceiling (the largest candidate),
    its frozen table and step costs in the manifest, rows at the ceiling with the blocks actually
    verified, AR's tokens; a resume rebuilds the policy from the manifest, never recalibrates."""
    out_dir = tmp_path / "out"
    args = run_args(tiny_model_dir, out_dir, "ar,pld@adaptive,samd@adaptive", "--auto-candidates", "2,4",
                    "--auto-questions", "1", "--auto-tokens", "5", "--no-report")
    code, _, err = cli(args, capsys)
    assert code == 0, err
    run, manifest, rows = only_run(out_dir)
    for spec in ("pld@adaptive", "samd@adaptive"):
        record = manifest["bc_adaptive"][spec]
        assert record["ceiling"] == 4 and len(record["step_ms"]) == 4 and record["forward_scale"] > 0
        assert {"whole", "ratio_rule", "adaptive", "table", "questions", "max_new_tokens"} <= set(record)
        assert record["history"] is True and record["rate_per_ms"] > 0
        mine = [r for r in rows if r["method"] == spec]
        assert mine and all(r["block_complexity"] == 4 and r["method_label"] == spec for r in mine)
        assert all(1 <= q <= 4 for r in mine for q in r["budget_used"])
        assert all(r["ar_match"] for r in mine)
    # resume: the finished run has nothing left, and the policy comes from the manifest
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 0, err
    assert "calibrating" not in err


def test_a_prediction_within_the_tie_margin_of_the_best_is_a_tie_the_smaller_budget_wins():
    # flat curve: BC 8 and BC 16 predict within 0.5 % of each other; BC 16 is 0.5 % higher
    flat = lambda q: 20.0  # noqa: E731
    eight, sixteen = profile(8, [2] * 200, [8] * 200), profile(16, [2] * 199 + [3], [16] * 200)
    best, pred = bcauto.choose_budget([sixteen, eight], flat)
    assert pred[16] > pred[8] > pred[16] * (1 - bcauto.TIE) and best == 8
    clear = profile(16, [2] * 190 + [3] * 10, [16] * 200)  # 5 % more tokens per step: not a tie
    assert bcauto.choose_budget([clear, eight], flat)[0] == 16
