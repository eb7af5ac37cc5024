"""#MAT and speedup per turn (report/turns.py): each turn summarised on its own, paired with
AR's same turn; written as turns.<ext> beside the main table when questions have several turns."""

from __future__ import annotations

import pytest
from helpers.rows import make_row, write_run

from specbench_cli.report.runs import write_report
from specbench_cli.report.turns import turn_summary, turn_table


def two_turn_rows() -> list[dict]:
    rows = []
    for q in ("q1", "q2"):
        for turn in (0, 1):
            rows.append(make_row("ar", q, [1] * 10, 1.0, category="mt_bench", turn=turn))
        rows.append(make_row("suffix", q, [2] * 5, 0.5, category="mt_bench", turn=0, draft_sizes=[3] * 5))
        rows.append(make_row("suffix", q, [4, 4, 2], 0.25, category="mt_bench", turn=1, draft_sizes=[5] * 3))
    return rows


def test_each_turn_has_its_own_mat_and_speedup():
    s = turn_summary(two_turn_rows()).set_index(["method_label", "turn"])
    assert s.loc[("suffix", 0), "mat"] == pytest.approx(2.0) and s.loc[("suffix", 1), "mat"] == pytest.approx(10 / 3)
    assert s.loc[("suffix", 0), "speedup"] == pytest.approx(2.0) and s.loc[("suffix", 1), "speedup"] == pytest.approx(4.0)
    assert s.loc[("ar", 1), "mat"] == 1.0 and s.loc[("ar", 1), "speedup"] == pytest.approx(1.0)
    table = turn_table(turn_summary(two_turn_rows()))
    assert table.headers == ["Method", "#MAT t1", "#MAT t2", "Speedup t1", "Speedup t2"]
    assert table.cells()[1] == ["suffix", "2.00", "3.33", "2.00", "4.00"]


def test_instances_at_other_budgets_get_their_own_rows():
    rows = two_turn_rows() + [{**r, "method_label": "suffix@4", "block_complexity": 4}
                              for r in two_turn_rows() if r["method"] == "suffix"]
    table = turn_table(turn_summary(rows))
    assert table.headers[:2] == ["Method", "BC"]
    assert [c[:2] for c in table.cells()] == [["ar", "8"], ["suffix", "8"], ["suffix@4", "4"]]


def test_single_turn_runs_have_no_turn_table(tmp_path):
    rows = [r for r in two_turn_rows() if r["turn"] == 0]
    assert turn_summary(rows).empty
    run = write_run(tmp_path / "one", rows)
    write_report([run], plots=False)
    assert not (run / "report" / "turns.md").exists() and (run / "report" / "table.md").exists()


def test_the_report_writes_the_turn_table(tmp_path):
    run = write_run(tmp_path / "two", two_turn_rows())
    write_report([run], plots=False)
    text = (run / "report" / "turns.md").read_text()
    assert "| suffix | 2.00 | 3.33 | 2.00 | 4.00 |" in text
    assert {p.name for p in (run / "report").glob("turns.*")} == {"turns.md", "turns.csv", "turns.tex", "turns.json"}
