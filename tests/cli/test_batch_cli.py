"""`--batch-size N` through the command line: a run decodes its questions N at a time and says
so in every row, resumes like any run, refuses a batch whose KV cache the machine cannot hold
before the model loads (one line, exit 2), and sweep grids expand over `batch_sizes`."""

from __future__ import annotations

import json

from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args
from helpers.sweep import write_grid

from specbench_cli.sweep.grid import expand, job_id, load_grid
from specbench_cli.sweep.questions import selector


def test_a_batched_run_records_batch_size_and_id_and_matches_ar(tiny_model_dir, tmp_path, capsys):
    # mt_bench (two turns) and qa, two questions each: batches of 3 are [mt, mt, qa] and [qa]
    args = tiny_run_args(tiny_model_dir, tmp_path, "--batch-size", "3")
    args[args.index("--limit") + 1] = "2"
    code, _, err = cli(args, capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path)
    rows = run_rows(run)
    assert json.loads((run / "manifest.json").read_text())["config"]["batch_size"] == 3
    assert {r["batch_size"] for r in rows} == {3} and all(r["status"] == "ok" for r in rows)
    ids = {(r["method"], r["question_id"], r["turn"]): r["batch_id"] for r in rows}
    questions = sorted({r["question_id"] for r in rows}, key=lambda q: min(i for i, r in enumerate(rows)
                                                                          if r["question_id"] == q))
    assert sorted(set(ids.values())) == [0, 1]
    assert [ids[("ar", q, 0)] for q in questions] == [0, 0, 0, 1]
    assert len([k for k in ids if k[2] == 1]) == 2 * 2  # the second turns of the two mt_bench questions
    assert all(r["ar_match"] for r in rows if r["method"] == "pld")
    # resume: drop the last batch's rows; they run again, the rest is kept
    kept = [r for r in rows if r["batch_id"] == 0]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 0, err
    again = run_rows(run)
    assert again[:len(kept)] == kept and len(again) == len(rows)
    assert {(r["method"], r["question_id"], r["turn"], r["batch_id"]) for r in again} == \
        {(r["method"], r["question_id"], r["turn"], r["batch_id"]) for r in rows}


def test_a_batch_the_machine_cannot_hold_is_refused_before_the_model_loads(tiny_model_dir, tmp_path, capsys,
                                                                          monkeypatch):
    import specbench_cli.models.load
    from specbench_cli.run import limits

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(specbench_cli.models.load, "load_model", refuse)
    monkeypatch.setattr(limits, "available_memory", lambda: 64 * 1024)
    code, out, err = cli(tiny_run_args(tiny_model_dir, tmp_path, "--batch-size", "2"), capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: --batch-size 2 needs about") and "available" in lines[0]
    assert not any(tmp_path.iterdir())  # no run folder


def test_the_estimate_counts_rows_times_the_longest_sequence_of_each_batch():
    from specbench_cli.run.limits import batch_cache_bytes, kv_bytes_per_token

    per = kv_bytes_per_token((30, 3, 64), "float32")
    assert per == 2 * 30 * 3 * 64 * 4
    need, row = batch_cache_bytes([100, 700, 50, 60, 40], 2, 128, 10, per, context=None)
    assert row == 700 + 128 + 11 and need == 2 * row * per  # the batch holding the 700-token prompt
    need, row = batch_cache_bytes([100, 9000], 2, 128, 10, per, context=8192)
    assert row == 8192 + 11  # a turn is capped where the context ends


def test_grids_expand_over_batch_sizes_and_refuse_a_bad_one(tmp_path, capsys):
    grid = load_grid(write_grid(tmp_path, 'methods = ["pld"]\ncategories = ["qa"]\nbatch_sizes = [1, 4]\n'
                                          'shard = "none"\n'))
    one, four = expand(grid, selector(grid))
    assert "--batch-size" not in one.args and "batch_size" not in one.settings  # ids of older grids unchanged
    assert four.args[four.args.index("--batch-size") + 1] == "4" and four.settings["batch_size"] == 4
    assert "-n4-" in four.id and one.id != four.id and job_id(dict(four.settings)) == four.id
    bad = write_grid(tmp_path, 'methods = ["pld"]\nbatch_sizes = [0]\n', "bad.toml")
    code, _, err = cli(["sweep", str(bad), "--dry-run"], capsys)
    assert code == 2 and "'batch_sizes' must be a non-empty list of integers >= 1" in " ".join(err.split())
