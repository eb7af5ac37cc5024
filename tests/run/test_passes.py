"""Every pass over the questions starts from nothing an earlier pass learned: with `--repeats`,
each method drafts in every pass exactly as in the first (greedy: the same tokens, the same
accepted lengths, the same draft sizes). A method that keeps state across questions (Token
Recycling's hot matrix, samd's recycling fallback, suffix's global tree) must drop it in
`forget`, which the runner calls when a pass starts; otherwise a later pass drafts from what the
same questions taught it (measured: samd's #MAT 2.32 in the first pass, 2.70 and 2.66 in the next
two, before recycling forgot its matrix)."""

from __future__ import annotations

from helpers.cli import cli, only_run_dir, run_rows

from specbench_cli import methods


def test_no_method_drafts_from_an_earlier_pass(tiny_model_dir, tmp_path, capsys):
    names = [n for n in methods.names() if not methods.get(n).needs_training and methods.get(n).lossless
             and not methods.get(n).requires]  # artifacts (heads, a datastore, a mask token) aside
    assert {"recycling", "samd", "suffix"} <= set(names)
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", ",".join(names),
                        "--categories", "mt_bench,qa", "--limit", "2", "--max-new-tokens", "24", "--repeats", "2",
                        "--output-dir", str(tmp_path), "--threads", "1", "--no-report"], capsys)
    assert code == 0, err
    rows = run_rows(only_run_dir(tmp_path))
    by = {}
    for r in rows:
        by.setdefault((r["method"], r["question_id"], r["turn"]), {})[r["repeat"]] = \
            (r["output_ids"], r["accept_lengths"], r["draft_sizes"])
    assert {label for label, _, _ in by} >= set(names)
    differ = sorted({label for (label, _, _), reps in by.items() if reps[0] != reps[1]})
    assert not differ, f"drafted from an earlier pass: {differ}"
