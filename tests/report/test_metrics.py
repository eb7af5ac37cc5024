"""Metrics against hand-computed numbers, and result-folder loading.

This module also holds the synthetic run builder (`make_row`, `write_run`, `synthetic_rows`)
that test_report.py and test_report_cli.py import.
"""

from __future__ import annotations

import json
import math

import pytest
from helpers.rows import TARGET_PARAMS, make_row, synthetic_rows, write_run

from specbench_cli.errors import UsageError
from specbench_cli.report import metrics as m
from specbench_cli.store.runfolder import all_rows, load_run, load_runs
from specbench_cli.tasks.categories import display_category, order_categories

# ----------------------------------------------------------------------------- builders


def overall(summary, label: str):
    """The `overall` summary row of one method."""
    row = summary[(summary["method_label"] == label) & (summary["category"] == m.OVERALL)]
    assert len(row) == 1
    return row.iloc[0]


def cell(summary, label: str, category: str):
    row = summary[(summary["method_label"] == label) & (summary["category"] == category)]
    assert len(row) == 1
    return row.iloc[0]


# ----------------------------------------------------------------------------- metrics


def test_mat_is_pooled_over_steps_not_averaged_per_row():
    rows = [make_row("pld", 1, [1, 2, 3], 1.0), make_row("pld", 2, [4], 1.0)]
    # pooled: (1+2+3+4) / 4 steps = 2.5; the mean of per-row #MAT would be (2 + 4) / 2 = 3
    assert overall(m.summarize(rows), "pld")["mat"] == pytest.approx(2.5)


def test_question_throughput_sums_turns():
    rows = [make_row("ar", 7, [1] * 9, 1.0, turn=0), make_row("ar", 7, [1] * 29, 2.0, turn=1)]
    tp = m.question_throughputs(rows)
    assert len(tp) == 1
    assert tp.iloc[0]["throughput"] == pytest.approx(40 / 3.0)  # not mean(10/1, 30/2) = 12.5


def two_question_rows() -> list[dict]:
    """AR: 10 tok/s and 5 tok/s; method: 20 tok/s on both; method also has q3 that AR lacks."""
    return [
        make_row("ar", 1, [1] * 9, 1.0), make_row("ar", 2, [1] * 19, 4.0),
        make_row("pld", 1, [2] * 4 + [1], 0.5, ar_match=True), make_row("pld", 2, [3] * 6 + [1], 1.0, ar_match=True),
        make_row("pld", 3, [2] * 20, 100.0, ar_match=False),
    ]


def test_speedup_is_ratio_of_mean_throughputs_over_paired_questions():
    s = overall(m.summarize(two_question_rows()), "pld")
    assert s["speedup"] == pytest.approx(20 / 7.5)  # ratio of sums would be (30/1.5)/(30/5) = 3.33
    assert s["median_speedup"] == pytest.approx(3.0)  # median(20/10, 20/5)
    assert s["n_paired"] == 2 and s["n_questions"] == 3
    assert s["tokens_per_s"] == pytest.approx((20 + 20 + 41 / 100) / 3)  # tok/s covers q3 too
    assert math.isnan(s["speedup_std"]) and s["n_replicates"] == 1
    assert overall(m.summarize(two_question_rows()), "ar")["speedup"] == pytest.approx(1.0)


def test_ar_agreement_counts_mismatches():
    s = overall(m.summarize(two_question_rows()), "pld")
    assert s["ar_agreement"] == pytest.approx(2 / 3)
    assert (s["ar_mismatches"], s["ar_compared"]) == (1, 3)
    assert math.isnan(overall(m.summarize(two_question_rows()), "ar")["ar_agreement"])


def test_errored_question_is_excluded_and_counted():
    rows = two_question_rows() + [make_row("pld", 2, [], 0.0, turn=1, status="error")]
    s = overall(m.summarize(rows), "pld")
    assert s["n_errors"] == 1
    assert s["n_paired"] == 1  # q2 lost a turn, so it is not paired
    assert s["speedup"] == pytest.approx(20 / 10)


def test_pairing_requires_same_turns():
    rows = [make_row("ar", 1, [1] * 9, 1.0, turn=0), make_row("ar", 1, [1] * 9, 1.0, turn=1),
            make_row("pld", 1, [2] * 5, 0.5, turn=0)]
    assert overall(m.summarize(rows), "pld")["n_paired"] == 0
    assert math.isnan(overall(m.summarize(rows), "pld")["speedup"])


def test_repeats_give_mean_and_sample_std_of_per_repeat_speedups():
    rows = []
    for repeat, method_time in ((0, 0.5), (1, 0.25), (2, 1.0)):  # speedups 2, 4, 1
        rows += [make_row("ar", 1, [1] * 9, 1.0, repeat=repeat), make_row("pld", 1, [2] * 4 + [1], method_time, repeat=repeat)]
    s = overall(m.summarize(rows), "pld")
    assert s["replicate_speedups"] == pytest.approx([2.0, 4.0, 1.0])
    assert s["speedup"] == pytest.approx(7 / 3)
    assert s["speedup_std"] == pytest.approx(math.sqrt(((2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2 + (1 - 7 / 3) ** 2) / 2))


def test_overall_pools_questions_rather_than_averaging_categories():
    rows = [
        make_row("ar", 1, [1] * 9, 1.0, category="qa"), make_row("pld", 1, [2] * 4 + [1], 0.5, category="qa"),
        make_row("ar", 2, [1] * 99, 1.0, category="rag"), make_row("pld", 2, [2] * 49 + [1], 1.0, category="rag"),
    ]
    summary = m.summarize(rows)
    assert cell(summary, "pld", "qa")["speedup"] == pytest.approx(2.0)
    assert cell(summary, "pld", "rag")["speedup"] == pytest.approx(1.0)
    assert overall(summary, "pld")["speedup"] == pytest.approx((20 + 100) / 2 / ((10 + 100) / 2))


def test_position_acceptance_hand_computed():
    accepts = [[4, 1, 3, 2]]  # accepted drafts 3, 0, 2, 1
    drafts = [[3, 3, 2, 1]]
    rates = m.position_acceptance(accepts, drafts)
    assert rates == pytest.approx({1: 3 / 4, 2: 2 / 3, 3: 1 / 2})
    assert m.position_acceptance([[1, 1]], [[0, 0]]) == {}


def test_chain_alphas_are_conditional_on_the_earlier_positions():
    accepts = [[4, 1, 3, 2], [2, 3], [2]]  # accepted drafts 3, 0, 2, 1 | 1, 2 | 1
    drafts = [[3, 3, 3, 3], [3, 2], [3]]
    # n=1: 6 of 7 steps; n=2: the 6 that accepted one go on, 3 accept a second; n=3: of the
    # steps with two accepted, the one that proposed only 2 never reached position 3 -> 1 of 2
    assert m.chain_alphas(accepts, drafts) == pytest.approx({1: 6 / 7, 2: 3 / 6, 3: 1 / 2})
    assert m.chain_alphas([[1, 1]], [[0, 0]]) == {}


def test_conditional_acceptance_of_trees_follows_the_path_the_target_took():
    """A tree step that accepted 1 token: whether position 2 was offered on that path decides
    whether it counts against p2 (draft_sizes counts every node of the tree, so it cannot say)."""
    accepts = [[2, 3, 1, 2]]          # accepted drafts 1, 2, 0, 1
    paths = [[2, 2, 1, 1]]            # step 1 refused at 2; step 2 ran out after 2; step 3 refused at 1; step 4 ran out
    rates = m.conditional_acceptance(accepts, paths)
    # p1: 4 steps offered position 1, 3 accepted it; p2: steps 1 and 2 offered it, step 2 accepted
    assert rates == pytest.approx({1: 3 / 4, 2: 1 / 2})
    row = make_row("eagle", 1, accepts[0], 1.0, draft_sizes=[9, 9, 9, 9], method_params={"structure": "tree"})
    tree_new = [{**row, "structure": "tree", "draft_path_lengths": paths[0]}]
    summary_row = overall(m.summarize(tree_new), "eagle")
    assert summary_row["conditional_acceptance"] == pytest.approx(rates)
    assert summary_row["mat"] == pytest.approx(2.0) and summary_row["al_no_bonus"] == pytest.approx(1.0)
    tree_old = [{**row, "structure": "tree"}]  # written before paths were recorded: not guessed
    assert overall(m.summarize(tree_old), "eagle")["conditional_acceptance"] == {}


def test_conditional_acceptance_of_chains_needs_no_recorded_paths():
    accepts, drafts = [[4, 1, 3, 2], [2, 3], [2]], [[3, 3, 3, 3], [3, 2], [3]]
    rows = [make_row("pld", i, a, 1.0, draft_sizes=d) for i, (a, d) in enumerate(zip(accepts, drafts))]
    rates = overall(m.summarize(rows), "pld")["conditional_acceptance"]
    assert rates == pytest.approx(m.chain_alphas(accepts, drafts, max_n=3))
    # recorded paths agree with the chain rule (a chain step is refused unless it took the whole draft)
    recorded = [{**r, "draft_path_lengths": [min(d, a) for a, d in zip(r["accept_lengths"], r["draft_sizes"])]}
                for r in rows]
    assert overall(m.summarize(recorded), "pld")["conditional_acceptance"] == pytest.approx(rates)


def test_mbsu_formula():
    rows = [make_row("sps", 1, [1, 2, 3], 1.0, draft_sizes=[4, 4, 4], extra_params=30_000_000),
            make_row("sps", 2, [4], 1.0, draft_sizes=[4], extra_params=30_000_000)]
    rows = [{**r, "target_params": 120_000_000} for r in rows]
    s = overall(m.summarize(rows), "sps")
    assert s["c"] == pytest.approx(0.25)
    assert s["mean_draft"] == pytest.approx(4.0)
    assert s["mbsu"] == pytest.approx(2.5 / (0.25 * 4 + 1))
    assert m.mbsu(2.5, 0, None, 7.0) == 2.5  # draft-free: c = 0, MBSU = tau
    assert math.isnan(m.mbsu(2.5, 10, None, 4.0))


def test_accept_length_distribution():
    rows = [make_row("pld", 1, [1, 2, 2, 5], 1.0), make_row("pld", 2, [2], 1.0)]
    assert m.distribution_by_method(rows) == {("", "pld"): {1: 1, 2: 3, 5: 1}}


def test_chain_detection_and_position_curves_skip_trees_and_ar():
    assert m.is_chain({"structure": "chain"}) and not m.is_chain({"structure": "tree"})
    assert not m.is_chain({"tree_choices": [[0], [1]]}) and m.is_chain({"draft_len": 4}) and m.is_chain(None)
    curves = m.position_acceptance_by_method(synthetic_rows(questions_per_category=1))
    assert {key[1] for key in curves} == {"pld", "sps(k=4)"}


def test_categories_fold_mt_bench_and_display_names():
    rows = [make_row("ar", 81, [1], 1.0, category="writing"), make_row("ar", 5, [1], 1.0, category="writing", task="mini")]
    assert set(m.to_frame(rows)["category"]) == {"mt_bench", "writing"}
    assert [display_category(c) for c in order_categories(["rag", "zeta", "overall", "math_reasoning", "mt_bench"])] \
        == ["MT-bench", "Math", "RAG", "zeta", "Overall"]


def test_ar_borrowed_from_another_run_of_the_same_model(tmp_path):
    ar_run = write_run(tmp_path / "a", [make_row("ar", 1, [1] * 9, 1.0)])
    pld_run = write_run(tmp_path / "b", [make_row("pld", 1, [2] * 4 + [1], 0.25)])
    other_model = write_run(tmp_path / "c", [make_row("pld", 1, [2] * 4 + [1], 0.25)], model="other")
    summary = m.summarize(all_rows(load_runs([ar_run, pld_run, other_model])))
    pld = summary[(summary["method_label"] == "pld") & (summary["category"] == m.OVERALL)].set_index("model")
    assert pld.loc["smollm2-135m", "speedup"] == pytest.approx(4.0)
    assert math.isnan(pld.loc["other", "speedup"])


def test_summarize_rejects_unknown_grouping():
    with pytest.raises(ValueError, match="cannot group"):
        m.summarize(two_question_rows(), by=("nonsense",))


def test_summarize_by_method_only_has_no_overall_duplicates():
    summary = m.summarize(two_question_rows(), by=("method_label",))
    assert sorted(summary["method_label"]) == ["ar", "pld"]


# ----------------------------------------------------------------------------- loading


def test_load_run_tags_rows(tmp_path):
    run = load_run(write_run(tmp_path / "r1", two_question_rows()))
    rows = run.tagged_rows()
    assert len(rows) == 5 and run.warnings == []
    assert {(r["run_id"], r["model"], r["target_params"]) for r in rows} == {("r1", "smollm2-135m", TARGET_PARAMS)}


def test_missing_folder_and_manifest(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="manifest.json"):
        load_run(tmp_path / "empty")


def test_malformed_line_is_named_and_skipped(tmp_path):
    folder = write_run(tmp_path / "r", two_question_rows())
    lines = (folder / "samples.jsonl").read_text().splitlines()
    lines[2] = lines[2][:30]
    (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
    run = load_run(folder)
    assert len(run.rows) == 4 and len(run.warnings) == 1 and "samples.jsonl:3: not valid JSON" in run.warnings[0]


def test_truncated_final_line_is_skipped_with_warning(tmp_path):
    folder = write_run(tmp_path / "r", two_question_rows())
    with open(folder / "samples.jsonl", "a") as f:
        f.write(json.dumps(make_row("pld", 4, [1], 1.0))[:57])  # crash mid-write, no newline
    run = load_run(folder)
    assert len(run.rows) == 5
    assert len(run.warnings) == 1 and "samples.jsonl:6" in run.warnings[0]


def test_row_missing_keys_is_named_and_skipped(tmp_path):
    row = make_row("pld", 1, [2], 1.0)
    del row["wall_time"]
    folder = write_run(tmp_path / "r", [make_row("ar", 1, [1], 1.0), row])
    run = load_run(folder)
    assert len(run.rows) == 1 and "samples.jsonl:2: missing key(s) wall_time" in run.warnings[0]


def test_bad_manifest_json(tmp_path):
    folder = write_run(tmp_path / "r", [])
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(UsageError, match="manifest.json: not valid JSON"):
        load_run(folder)
