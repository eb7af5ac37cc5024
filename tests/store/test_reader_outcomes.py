"""Readers accept every outcome the writer can produce (all rows failed, all zero-time, mixed),
type-check row fields at read, and `check` exits 2 when it compared nothing."""

from __future__ import annotations

import json

import pytest
from helpers.cli import cli
from helpers.rows import synthetic_rows, write_run


def _run(folder, edit=None, which=None):
    rows = synthetic_rows(seed=1, methods=("pld",), questions_per_category=1)
    for i, row in enumerate(rows):
        if edit and (which is None or which(i, row)):
            edit(row)
    return write_run(folder, rows)


def _fail(row):
    row.update(status="error", error="RuntimeError: boom")


def _no_time(row):
    row["wall_time"] = 0.0


@pytest.mark.parametrize("edit, which", [(_fail, None), (_no_time, None), (_fail, lambda i, r: i % 2 == 0),
                                         (_fail, lambda i, r: r["method"] == "ar")],
                         ids=["all-error", "all-zero-time", "mixed", "ar-failed"])
def test_report_baseline_compare_never_crash(tmp_path, capsys, edit, which):
    run = _run(tmp_path / "run", edit, which)
    good = _run(tmp_path / "good")
    code, out, err = cli(["report", str(run), "--no-plots"], capsys)
    assert code == 0, err
    assert "pld" in out
    if edit is _fail:
        assert "errored and are left out" in " ".join(err.split()) + " ".join(out.split())
    assert cli(["compare", str(good), str(run)], capsys)[0] == 0
    # none of these runs has a speedup to record: a baseline of it would let `check` compare no speed
    code, _, err = cli(["baseline", str(run), "-o", str(tmp_path / "b.json")], capsys)
    assert code == 2 and "speedup" in err and not (tmp_path / "b.json").exists()


def test_check_on_a_baseline_with_only_nulls_exits_2(tmp_path, capsys):
    run = _run(tmp_path / "run")
    assert cli(["baseline", str(run), "-o", str(tmp_path / "b.json")], capsys)[0] == 0
    doc = json.loads((tmp_path / "b.json").read_text())
    for entry in doc["entries"]:
        entry.update(mat=None, speedup=None)
    (tmp_path / "b.json").write_text(json.dumps(doc))
    code, _, err = cli(["check", str(run), "-b", str(tmp_path / "b.json")], capsys)
    assert code == 2 and "compared nothing" in err and "null" in err


def test_check_with_no_overlapping_entry_exits_2(tmp_path, capsys):
    run = _run(tmp_path / "run")
    assert cli(["baseline", str(run), "-o", str(tmp_path / "b.json")], capsys)[0] == 0
    doc = json.loads((tmp_path / "b.json").read_text())
    for entry in doc["entries"]:
        entry["method_label"] = "other-" + entry["method_label"]
    (tmp_path / "b.json").write_text(json.dumps(doc))
    code, _, err = cli(["check", str(run), "-b", str(tmp_path / "b.json")], capsys)
    assert code == 2 and "compared nothing" in err


@pytest.mark.parametrize("field, value", [("scorer", 5), ("method_stats", [1])])
def test_a_row_field_of_the_wrong_type_names_file_line_and_field(tmp_path, capsys, field, value):
    run = _run(tmp_path / "run", lambda r: r.__setitem__(field, value), lambda i, r: i == 2)
    code, _, err = cli(["report", str(run), "--no-plots"], capsys)
    text = " ".join(err.split())
    # named in one warning and skipped: the other rows are reported
    assert code == 0 and "samples.jsonl:3" in text and f"'{field}'" in text and "row skipped" in text
