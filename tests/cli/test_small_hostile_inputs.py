"""Smaller hostile or unlucky inputs, each one line or one warning: `--resume` of a folder holding
a row made at another batch size, a torn last line or duplicate rows; a method option given twice;
a negative number for an option bounded at 1; a heads "folder" that is a file."""

from __future__ import annotations

import json

import pytest
from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("note:", "warning:"))]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return " ".join(lines[0].split())


def test_resume_drops_rows_of_another_batch_size_and_says_what_it_read(tiny_model_dir, tmp_path, capsys):
    """A row recorded at batch size 4 in a batch-size-1 run was kept (the report then showed a
    phantom N = 4 row); the torn line and duplicate warnings docs/reliability.md promises were not
    printed. Now each is one warning line, the foreign row runs again at the run's batch size."""
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path)
    rows = run_rows(run)
    foreign = {**rows[1], "batch_size": 4, "batch_id": 0}
    text = "".join(json.dumps(r) + "\n" for r in [rows[0], foreign, *rows[2:], rows[2]])
    (run / "samples.jsonl").write_text(text + '{"method": "ar", "que')  # a duplicate, then a torn line
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    said = " ".join(err.split())
    assert code == 0, err
    assert "skipped a truncated final line" in said and "ignored 1 duplicate row(s)" in said
    assert "dropped 1 row(s) recorded at another batch size than the run's 1; they run again" in said
    after = run_rows(run)
    assert len(after) == len(rows) and {r.get("batch_size", 1) for r in after} == {1}


def test_a_method_option_given_twice_is_refused(capsys):
    code, _, err = cli(["run", "--methods", "suffix", "-o", "suffix.max_tree_depth=4",
                        "-o", "suffix.max_tree_depth=8"], capsys)
    assert code == 2
    assert "--option suffix.max_tree_depth given twice (4 and 8); give it once" in _error_line(err)


@pytest.mark.parametrize("command", [["run"], ["cost"]])
def test_a_negative_batch_size_names_the_real_bound(command, capsys):
    code, _, err = cli([*command, "--batch-size", "-1"], capsys)
    assert code == 2 and "--batch-size must be between 1 and 256 (got -1)" in _error_line(err)


@pytest.mark.parametrize("flag,value,bound", [("--max-q", "-1", "between 1 and 1024"),
                                              ("--context", "-1", "between 1 and 32768"),
                                              ("--warmup", "-2", "between 0 and 1000"),
                                              ("--max-q", "5000", "between 1 and 1024")])
def test_cost_names_its_own_declared_bounds(flag, value, bound, capsys):
    code, _, err = cli(["cost", flag, value], capsys)
    assert code == 2 and f"{flag} must be {bound} (got {value})" in _error_line(err)


def test_a_number_option_without_a_declared_bound_keeps_the_general_one(tmp_path, capsys):
    code, _, err = cli(["train", "heads", "--data", str(tmp_path / "d.jsonl"), "-o", str(tmp_path / "h"),
                        "--steps", "-3"], capsys)
    assert code == 2 and "--steps must be a finite number >= 0 (got -3)" in _error_line(err)


def test_a_heads_path_that_is_a_file_is_named_as_a_file(tmp_path, capsys):
    existing = tmp_path / "passwd"
    existing.write_text("root:x:0:0\n")
    code, _, err = cli(["run", "--methods", "eagle", "-o", f"eagle.heads={existing}"], capsys)
    assert code == 2 and f"{existing} is a file, not a heads folder" in _error_line(err)
