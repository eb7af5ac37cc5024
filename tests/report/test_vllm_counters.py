"""vLLM's speculative-decoding counters in `report --format json`: every summary group carries
`spec_decode_num_drafts`, `spec_decode_num_draft_tokens`, `spec_decode_num_accepted_tokens` and
`spec_decode_num_accepted_tokens_per_pos`, computed from the rows' per-step fields as
docs/metrics.md defines them (a draft is a step that proposed something; a tree's draft tokens are
all its nodes; the bonus token is never a draft token)."""

from __future__ import annotations

import json

from helpers.cli import cli
from helpers.rows import make_row, write_run

from specbench_cli.report.metrics import vllm_counters


def tree_row(question: str, accept_lengths: list[int], draft_sizes: list[int], budget_used: list[int], **kw) -> dict:
    row = make_row("lookahead", question, accept_lengths, 1.0, draft_sizes=draft_sizes, block_complexity=8, **kw)
    row["budget_used"] = budget_used
    return row


def test_counters_of_a_hand_made_run(tmp_path, capsys):
    rows = [
        # step 2 drafted nothing (not a draft); 6 + 5 + 4 tree nodes; 2 + 1 + 0 accepted
        tree_row("1", [3, 1, 2, 1], [6, 0, 5, 4], [7, 1, 6, 5]),
        # a full block (BC 8: 7 draft positions) with 3 accepted, then a draft of 3 refused at its first position
        tree_row("2", [4, 1], [7, 3], [8, 4]),
        # an errored row counts nowhere
        tree_row("3", [5, 5], [7, 7], [8, 8], status="error"),
        *(make_row("ar", q, [1, 1, 1], 2.0, block_complexity=1) for q in ("1", "2", "3")),
    ]
    for row in rows:
        if row["method"] == "ar":
            row["budget_used"] = [1, 1, 1]
    run = write_run(tmp_path / "20250501-120000-abcdef", rows)
    code, out, err = cli(["report", str(run), "--format", "json", "--no-plots"], capsys)
    assert code == 0, err
    summary = json.loads(out)["summary"]
    overall = {r["method_label"]: r for r in summary if r["category"] == "overall"}
    tree = overall["lookahead"]
    assert tree["spec_decode_num_drafts"] == 5
    assert tree["spec_decode_num_draft_tokens"] == 6 + 5 + 4 + 7 + 3
    assert tree["spec_decode_num_accepted_tokens"] == 2 + 1 + 0 + 3 + 0
    # positions 1..7 (BC 8); drafts accepting >= 1: three, >= 2: two, >= 3: one
    assert tree["spec_decode_num_accepted_tokens_per_pos"] == [3, 2, 1, 0, 0, 0, 0]
    # vLLM's mean acceptance length is specbench's #MAT over the steps that drafted
    assert 1 + tree["spec_decode_num_accepted_tokens"] / tree["spec_decode_num_drafts"] == 1 + 6 / 5
    ar = overall["ar"]
    assert (ar["spec_decode_num_drafts"], ar["spec_decode_num_draft_tokens"], ar["spec_decode_num_accepted_tokens"],
            ar["spec_decode_num_accepted_tokens_per_pos"]) == (0, 0, 0, [])


def test_per_position_counts_sum_to_the_accepted_tokens():
    counters = vllm_counters([[3, 1, 4], [2]], [[3, 2, 5], [1]], [[6, 3, 6], [2]])
    assert counters["spec_decode_num_accepted_tokens"] == 2 + 0 + 3 + 1
    assert sum(counters["spec_decode_num_accepted_tokens_per_pos"]) == counters["spec_decode_num_accepted_tokens"]
    assert counters["spec_decode_num_accepted_tokens_per_pos"] == [3, 2, 1, 0, 0]
