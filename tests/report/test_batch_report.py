"""Reports per method and batch size (report/batch.py): throughput summed over each batch,
per-sequence tokens/s, TPOT, speedup over AR at the *same* N, cross-batch agreement, the
crossover N, and the files and figure `specbench report` writes for them."""

from __future__ import annotations

import math

import pytest
from helpers.cli import cli
from helpers.rows import make_row, write_run

from specbench_cli.report import metrics
from specbench_cli.report.batch import batch_summary, batch_table, crossovers


def _row(method, qid, n, batch_id, wall, tokens, prefill=0.5, accepts=None, ids=None, label=None):
    accepts = accepts or [1] * (tokens - 1)
    row = make_row(method, qid, accepts, wall, new_tokens=tokens, label=label, ar_match=True)
    row.update(batch_size=n, batch_id=batch_id, prefill_time=prefill, run_id=f"run-n{n}", model="m")
    if ids is not None:
        row["output_ids"] = ids
    return row


def _rows():
    """Two questions. N=1: AR 10 tok/s; pld 20 tok/s. N=2 (one batch): AR's members finish at 1.0 s
    and 1.2 s (throughput 20 / 1.2); pld's at 1.5 s and 2.0 s, slower than AR at that N."""
    rows = []
    for q in ("1", "2"):
        rows.append(_row("ar", q, 1, None, 1.0, 10, ids=list(range(10))))
        rows.append(_row("pld", q, 1, None, 0.5, 10, accepts=[5, 4], ids=list(range(10))))
    rows.append(_row("ar", "1", 2, 0, 1.0, 10, ids=list(range(10))))
    rows.append(_row("ar", "2", 2, 0, 1.2, 10, ids=list(range(10))))
    rows.append(_row("pld", "1", 2, 0, 1.5, 10, accepts=[5, 4], ids=list(range(10))))
    rows.append(_row("pld", "2", 2, 0, 2.0, 10, accepts=[5, 4], ids=[0, 1, 2, 99, 4, 5, 6, 7, 8, 9]))
    return rows


def _get(summary, label, n, col):
    return float(summary[(summary["method_label"] == label) & (summary["batch_size"] == n)][col].iloc[0])


def test_batch_metrics_pair_with_ar_at_the_same_batch_size():
    s = batch_summary(_rows())
    assert _get(s, "ar", 2, "throughput") == pytest.approx(20 / 1.2)      # a batch lasts as long as its last member
    assert _get(s, "pld", 2, "throughput") == pytest.approx(20 / 2.0)
    assert _get(s, "pld", 2, "throughput_ratio") == pytest.approx((20 / 2.0) / (20 / 1.2))
    assert _get(s, "ar", 2, "ar_gain") == pytest.approx((20 / 1.2) / 10)  # AR's gain from batching
    assert _get(s, "pld", 1, "speedup") == pytest.approx(2.0)             # over AR at N=1 ...
    assert _get(s, "pld", 2, "speedup") == pytest.approx((10 / 1.5 + 10 / 2.0) / (10 / 1.0 + 10 / 1.2))  # ... at N=2
    assert _get(s, "pld", 2, "tokens_per_s") == pytest.approx((10 / 1.5 + 10 / 2.0) / 2)
    assert _get(s, "ar", 1, "tpot_ms") == pytest.approx(1000 * (0.5 + 0.5) / 18)
    assert _get(s, "pld", 2, "mat") == pytest.approx(4.5)
    assert _get(s, "pld", 2, "batch_agreement") == pytest.approx(0.5)     # one answer changed against N=1
    assert _get(s, "ar", 2, "batch_agreement") == 1.0
    assert math.isnan(_get(s, "pld", 1, "batch_agreement"))
    assert crossovers(s) == {("m", "pld", 8): 2}
    notes = batch_table(s).notes
    assert any("pld (BC 8): below 1.0x from N = 2." in n for n in notes)


def test_a_method_above_ar_at_every_batch_size_has_no_crossover():
    rows = [r for r in _rows() if not (r["method"] == "pld" and r["batch_size"] == 2)]
    rows += [_row("pld", "1", 2, 0, 0.6, 10, accepts=[5, 4]), _row("pld", "2", 2, 0, 0.7, 10, accepts=[5, 4])]
    s = batch_summary(rows)
    assert crossovers(s) == {("m", "pld", 8): None}
    assert any("at or above 1.0x at every N measured (1, 2)" in n for n in batch_table(s).notes)


def test_the_main_table_pairs_each_batch_size_with_its_own_ar():
    s = metrics.summarize(_rows())
    overall = s[(s["category"] == "overall") & (s["method_label"] == "pld")].set_index("batch_size")
    assert overall.loc[1, "speedup"] == pytest.approx(2.0)
    assert overall.loc[2, "speedup"] < 1.0


def test_report_writes_the_batch_table_and_figure_for_runs_at_several_batch_sizes(tmp_path, capsys):
    runs = []
    for n in (1, 2):
        rows = [{k: v for k, v in r.items() if k not in ("run_id", "model")} for r in _rows() if r["batch_size"] == n]
        runs.append(write_run(tmp_path / f"run-n{n}", rows))
    code, out, err = cli(["report", *map(str, runs), "-o", str(tmp_path / "rep")], capsys)
    assert code == 0, err
    assert (tmp_path / "rep" / "batch.md").is_file() and (tmp_path / "rep" / "speedup_vs_batch_size.png").is_file()
    text = (tmp_path / "rep" / "batch.md").read_text()
    assert "| pld | 8 | 2 |" in text and "below 1.0x from N = 2" in text
    assert "Batch size" in out and "Thr. tok/s" in out


def test_check_refuses_a_baseline_made_at_another_batch_size(tmp_path, capsys):
    import json

    rows = [{k: v for k, v in r.items() if k not in ("run_id", "model")} for r in _rows() if r["batch_size"] == 1]
    one = write_run(tmp_path / "run-n1", rows)
    code, _, err = cli(["baseline", str(one), "-o", str(tmp_path / "b.json")], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "b.json").read_text())["settings"]["batch_size"] == 1
    two = write_run(tmp_path / "run-n2", [dict(r, batch_size=2, batch_id=0) for r in rows])
    manifest = json.loads((two / "manifest.json").read_text())
    manifest["config"]["batch_size"] = 2
    (two / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = cli(["check", str(two), "--baseline", str(tmp_path / "b.json")], capsys)
    assert code == 2 and "batch_size: baseline 1, run 2" in err
