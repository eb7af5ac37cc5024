"""Where the time goes (report/timing.py): the table's numbers by hand from synthetic rows, the
predicted and oracle speedups, older rows without the split, the HTML stacked bar, the
#MAT-by-temperature table."""

from __future__ import annotations

import json
import math
import re

import pytest
from helpers.rows import make_row, write_run

from specbench_cli.report import metrics, timing
from specbench_cli.report.render import to_csv, to_markdown
from specbench_cli.store.rows import SampleRow, validate


def with_split(row: dict, propose, forward, accept, commit, observe, prefill=0.01, depths=None) -> dict:
    """`row` with the split's totals (seconds) and per-step lists; wall = prefill + parts + 10 ms other."""
    steps = len(row["accept_lengths"])
    parts = dict(propose=propose, forward=forward, accept=accept, commit=commit, observe=observe)
    for name, total in parts.items():
        row[f"{name}_time"] = total
        row[f"step_{name}_ms"] = [1000 * total / steps] * steps
    row["prefill_time"] = prefill
    row["wall_time"] = prefill + sum(parts.values()) + 0.010
    row["draft_depths"] = depths if depths is not None else [b - 1 for b in row["budget_used"]]
    return row


def rows_by_hand():
    ar = with_split(make_row("ar", 1, [1, 1, 1, 1], 0, block_complexity=1), 0.0, 0.080, 0.004, 0.004, 0.0)
    pld = make_row("pld", 1, [3, 1], 0, draft_sizes=[3, 3], block_complexity=4)
    pld["structure"] = "chain"
    pld = with_split(pld, 0.002, 0.050, 0.004, 0.002, 0.002)
    return [ar, pld]


def test_rows_round_trip_with_and_without_the_split():
    row = rows_by_hand()[1]
    back = SampleRow.from_dict(row).to_dict()
    for key in ("propose_time", "step_forward_ms", "draft_depths", "observe_time"):
        assert back[key] == row[key]
    old = make_row("pld", 1, [2], 0.1)  # written before the split existed
    assert SampleRow.from_dict(old).forward_time is None
    for bad in ({"forward_time": -1.0}, {"step_accept_ms": [1.0, "x"]}, {"draft_depths": [1.5]},
                {"commit_time": float("inf")}):
        with pytest.raises(Exception, match=list(bad)[0]):
            validate({**old, **bad})


def test_the_table_numbers_by_hand():
    rows = rows_by_hand()
    summary = metrics.summarize(rows)
    frame = timing.breakdown(rows, summary).set_index("method_label")
    pld = frame.loc["pld"]
    decode = 0.002 + 0.050 + 0.004 + 0.002 + 0.002 + 0.010  # wall - prefill
    assert pld["steps"] == 2 and pld["mat"] == pytest.approx(2.0)
    assert pld["step_ms"] == pytest.approx(1000 * decode / 2)
    assert pld["forward_ms"] == pytest.approx(25.0)
    assert pld["forward_share"] == pytest.approx(0.050 / decode)
    assert pld["other_ms"] == pytest.approx(5.0)
    assert pld["other_share"] == pytest.approx(0.010 / decode)
    assert sum(pld[f"{p}_share"] for p in timing.SHOWN_PARTS) == pytest.approx(1.0)
    # oracle: every draft of 3 accepted -> 4 tokens per step instead of #MAT 2, at the same step cost
    assert pld["oracle_mat"] == pytest.approx(4.0)
    assert pld["oracle"] == pytest.approx(pld["measured"] * 2.0)
    assert math.isnan(pld["predicted"])  # no cost curve in the manifests
    table = timing.time_table(rows, summary)
    md = to_markdown(table)
    assert "| pld |" in md and "25.00 (71%)" in md and "Pred." in md
    assert "forward_share" in to_csv(table).splitlines()[0]


def test_predicted_speedup_on_synthetic_numbers():
    rows = rows_by_hand()
    curve = {"ms": [10.0, 12.0, 14.0, 16.0], "key": {}}  # t(q) = 8 + 2q ms
    manifests = {"r": {"cost_curve": curve}}
    for row in rows:
        row["run_id"] = "r"
    frame = timing.breakdown(rows, metrics.summarize(rows), manifests).set_index("method_label")
    # AR: decode 80 + 4 + 4 + 10 = 98 ms; 4 tokens / (4 t(1) + 0 drafting + (98 - 80) ms other) = 4 / 58 ms
    # pld: decode 70 ms; 4 tokens / (2 t(4) + 4 ms drafting + (70 - 50 - 4) ms other) = 4 / 52 ms
    assert frame.loc["pld", "predicted"] == pytest.approx((4 / 52) / (4 / 58))
    assert frame.loc["ar", "predicted"] == pytest.approx(1.0)
    # a curve measured at another batch size is not this run's
    wrong = {"r": {"cost_curve": {**curve, "key": {"batch_size": 4}}}}
    assert math.isnan(timing.breakdown(rows, None, wrong).set_index("method_label").loc["pld", "predicted"])


def test_the_report_model_is_bcautos():
    from specbench_cli.run.auto import bcauto

    ms = [5.0, 9.0, 7.0, 11.0]
    for q in range(1, 9):
        assert timing.monotone(ms)(q) == bcauto.monotone(ms)(q)
    p = bcauto.Profile(budget=4, accept_lengths=[3, 1, 2], budget_used=[4, 4, 2], draft_ms=[1.0, 2.0, 0.5],
                       overhead_ms=6.0)
    mine = timing.StepCosts(accept_lengths=[3, 1, 2], budget_used=[4, 4, 2], draft_ms=3.5, overhead_ms=6.0)
    t = bcauto.monotone(ms)
    assert timing.predicted_tokens_per_s(mine, t) == pytest.approx(bcauto.predicted_tokens_per_s(p, t))


def test_older_rows_print_dashes():
    rows = [make_row("ar", 1, [1, 1], 0.1), make_row("pld", 1, [2], 0.05, draft_sizes=[3])]
    table = timing.time_table(rows, metrics.summarize(rows))
    md = to_markdown(table)
    pld = next(line for line in md.splitlines() if line.startswith("| pld"))
    cells = [c.strip() for c in pld.strip("|").split("|")]
    assert cells[4:10] == ["–"] * 6 and cells[-3] == "–"  # parts and Pred.
    assert cells[-1] == "–"  # no depths and no chain structure: no oracle


def test_html_has_a_stacked_bar_and_loads_nothing(tmp_path):
    from specbench_cli.report.runs import write_html_report

    rows = rows_by_hand()
    run = write_run(tmp_path / "20250501-120000-abcdef", rows)
    path = write_html_report([run], tmp_path / "r.html", plots=False)
    text = path.read_text(encoding="utf-8")
    assert "Where the time goes" in text
    assert text.count('class="sharerow"') == 2 and 'class="seg"' in text
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text)


def test_report_writes_the_time_files(tmp_path):
    from specbench_cli.report.runs import write_report

    run = write_run(tmp_path / "20250501-120000-abcdef", rows_by_hand())
    out = write_report([run], output=tmp_path / "rep", plots=False)
    assert (out / "time.md").exists() and (out / "time.csv").exists() and (out / "time.tex").exists()
    doc = json.loads((out / "time.json").read_text())
    assert doc["title"].startswith("Where the time goes")
    assert not (out / "temperature.md").exists()  # one temperature: no sweep table


def test_mat_by_temperature():
    rows = []
    for t, lengths in ((0.0, [3, 3]), (0.7, [2, 2]), (1.0, [1, 3])):
        for m in ("ar", "pld"):
            row = make_row(m, f"q{t}", [1, 1] if m == "ar" else lengths, 0.1)
            row["temperature"] = t
            rows.append(row)
    table = timing.temperature_table(rows)
    assert [c.header for c in table.columns] == ["Method", "T=0", "T=0.7", "T=1"]
    md = to_markdown(table)
    assert "| pld | 3.00 | 2.00 | 2.00 |" in md and "| ar | 1.00 | 1.00 | 1.00 |" in md
    assert timing.temperature_table(rows[:2]) is None


def test_the_time_table_puts_bc_auto_s_prediction_next_to_the_measured_decode_speed():
    """`--bc auto` predicts decode tokens/s on its calibration questions (manifest `bc_auto`);
    the report sets it next to the decode tokens/s the run measured for that instance: accepted
    tokens over wall - prefill, the prediction's own basis."""
    rows = rows_by_hand()
    auto = make_row("pld@auto", 1, [3, 1, 2], 0, draft_sizes=[3, 3, 3], block_complexity=6, label="pld@auto")
    auto["structure"] = "chain"
    auto = with_split(auto, 0.003, 0.090, 0.003, 0.002, 0.002, prefill=0.5)   # the prefill is left out
    for r in rows + [auto]:
        r["run_id"] = "r1"
    decode = 0.003 + 0.090 + 0.003 + 0.002 + 0.002 + 0.010
    manifest = {"bc_auto": {"pld@auto": {"chosen": 6, "candidates": {
        "4": {"predicted_tokens_per_s": 50.0}, "6": {"predicted_tokens_per_s": 66.0}}}}}
    found = timing.auto_predictions(rows + [auto], {"r1": manifest})
    assert found == [{"label": "pld@auto", "bc": 6, "predicted": 66.0, "measured": pytest.approx(6 / decode)}]
    note = timing.auto_note(rows + [auto], {"r1": manifest})
    assert "pld@auto BC 6: predicted 66.0, measured 54.5 (x1.21)" in note
    table = timing.time_table(rows + [auto], metrics.summarize(rows + [auto]), {"r1": manifest})
    assert note in table.notes
    # another run's manifest, or a run without auto, adds nothing
    assert timing.auto_predictions(rows + [auto], {"r2": manifest}) == []
    assert timing.auto_note(rows, {"r1": {}}) is None
