"""`specbench run --temperature 0,1.0`: a sweep inside one run, every method and AR at each
temperature, rows that carry theirs, resume per temperature, and reports that never pool two
temperatures (one value: exactly as before)."""

from __future__ import annotations

import json

import pytest
from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args
from helpers.rows import make_row, write_run

from specbench_cli.config import DecodingSection, RunConfig, parse_temperatures, temperatures
from specbench_cli.errors import UsageError
from specbench_cli.report import metrics
from specbench_cli.report.timing import temperature_table
from specbench_cli.store.rows import row_key


def test_one_value_or_a_list():
    assert parse_temperatures("0.7") == 0.7 and parse_temperatures("0") == 0.0
    assert parse_temperatures(" 0, 0.7 ,1") == [0.0, 0.7, 1.0]
    cfg = RunConfig(decoding=DecodingSection(temperature=parse_temperatures("0,1")))
    cfg.validate()
    assert temperatures(cfg) == [0.0, 1.0] and temperatures(RunConfig(decoding=DecodingSection(temperature=0.5))) == [0.5]


@pytest.mark.parametrize("value, message", [
    ("0,abc", "--temperature must be a finite number >= 0 (got abc)"),
    ("0,-1", "--temperature must be a finite number >= 0"),
    ("0,,1", "an empty item"),
    ("0.7,", "an empty item"),
    ("0.7,0.70", "0.70 is given twice"),
    ("0,nan", "finite number"),
])
def test_bad_lists_are_refused(value, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_temperatures(value)


@pytest.mark.parametrize("value, message", [
    ("0,abc", "--temperature must be a finite number >= 0 (got abc)"),
    ("0,-0.5", "--temperature must be a finite number >= 0"),
    ("0,,1", "an empty item"),
    ("1,1", "is given twice"),
])
def test_bad_lists_exit_2_before_the_model_loads(tmp_path, capsys, value, message):
    missing = tmp_path / "no-such-model"  # loading it would fail with another message
    code, _, err = cli(tiny_run_args(missing, tmp_path / "runs", "--temperature", value), capsys)
    assert code == 2 and message in " ".join(err.split())
    assert not (tmp_path / "runs").exists()


def test_a_sweep_takes_fixed_budgets(tmp_path, capsys):
    code, _, err = cli(tiny_run_args(tmp_path / "m", tmp_path / "runs", "--temperature", "0,1", "--bc", "auto"),
                       capsys)
    assert code == 2 and "fixed budgets" in err


def _keys(rows):
    return sorted((r["method"], r["question_id"], r["turn"], r["temperature"]) for r in rows)


def test_sweep_runs_every_method_and_ar_at_each_temperature_and_reports_each(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "runs"
    code, _, err = cli(tiny_run_args(tiny_model_dir, out, "--temperature", "0,1.0"), capsys)
    assert code == 0, err
    run = only_run_dir(out)
    rows = run_rows(run)
    assert json.loads((run / "manifest.json").read_text())["config"]["temperature"] == [0.0, 1.0]
    by_temp = {t: {(r["method"], r["question_id"], r["turn"]) for r in rows if r["temperature"] == t} for t in (0.0, 1.0)}
    assert by_temp[0.0] == by_temp[1.0] and {m for m, _, _ in by_temp[0.0]} == {"ar", "pld"}
    assert len(rows) == len({row_key(r) for r in rows}) == 2 * len(by_temp[0.0])
    # greedy pld reproduces greedy AR; every row is compared with AR at its own temperature
    assert all(r["ar_match"] for r in rows if r["method"] == "pld" and r["temperature"] == 0.0)
    assert all(r["ar_match"] is not None for r in rows if r["method"] == "pld")

    code, _, err = cli(["report", str(run), "--no-plots"], capsys)
    assert code == 0, err
    table = (run / "report" / "table.md").read_text()
    for label in ("ar (T=0)", "ar (T=1)", "pld (T=0)", "pld (T=1)"):
        assert f"| {label} |" in table
    assert "| ar |" not in table and "| pld |" not in table  # never pooled over temperatures
    csv = (run / "report" / "table.csv").read_text()
    assert "pld (T=1)," in csv
    sweep = (run / "report" / "temperature.md").read_text()
    assert "#MAT by temperature" in sweep and "| T=0 | T=1 |" in sweep and "| pld |" in sweep


def test_an_interrupted_sweep_resumes(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "runs"
    assert cli(tiny_run_args(tiny_model_dir, out, "--temperature", "0,1"), capsys)[0] == 0
    run = only_run_dir(out)
    lines = (run / "samples.jsonl").read_text().splitlines()
    full = [json.loads(line) for line in lines]
    kept = len(full) // 2 + 1  # all of T=0 and the first row of T=1: as if stopped there
    (run / "samples.jsonl").write_text("\n".join(lines[:kept]) + "\n")
    code, _, err = cli(["run", "--resume", str(run), "--no-report", "--threads", "1"], capsys)
    assert code == 0, err
    rows = run_rows(run)
    assert _keys(rows) == _keys(full) and len(rows) == len({row_key(r) for r in rows})
    assert rows[:kept] == full[:kept]  # finished rows are kept, not rerun
    # the resumed T=1 pld rows were compared with the T=1 AR rows
    assert all(r["ar_match"] is not None for r in rows if r["method"] == "pld")


def test_one_temperature_is_unchanged(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "runs"
    assert cli(tiny_run_args(tiny_model_dir, out, "--temperature", "0.5"), capsys)[0] == 0
    run = only_run_dir(out)
    assert json.loads((run / "manifest.json").read_text())["config"]["temperature"] == 0.5
    assert {r["temperature"] for r in run_rows(run)} == {0.5}
    assert cli(["report", str(run), "--no-plots"], capsys)[0] == 0
    assert "(T=" not in (run / "report" / "table.md").read_text()
    assert not (run / "report" / "temperature.md").exists()


def _sweep_rows():
    """AR and pld at two temperatures; AR is much slower at T=1, so pairing across temperatures shows."""
    rows = []
    for t, ar_time in ((0.0, 1.0), (1.0, 4.0)):
        for q in ("1", "2"):
            rows.append({**make_row("ar", q, [1] * 10, ar_time), "temperature": t})
            rows.append({**make_row("pld", q, [2] * 5, 0.5, draft_sizes=[3] * 5), "temperature": t})
    return rows


def test_speedups_pair_with_ar_at_the_same_temperature():
    rows = metrics.label_temperatures(_sweep_rows())
    overall = metrics.summarize(rows)
    overall = overall[overall["category"] == metrics.OVERALL].set_index("method_label")
    assert list(overall.index) == ["ar (T=0)", "ar (T=1)", "pld (T=0)", "pld (T=1)"]
    assert overall.at["pld (T=0)", "speedup"] == pytest.approx(2.0)
    assert overall.at["pld (T=1)", "speedup"] == pytest.approx(8.0)
    assert overall.at["ar (T=1)", "tokens_per_s"] == pytest.approx(11 / 4)
    table = temperature_table(rows)
    assert table is not None and list(table.frame["method_label"]) == ["ar", "pld"]


def test_one_temperature_keeps_its_labels():
    rows = [make_row("ar", "1", [1] * 4, 1.0), make_row("pld", "1", [2] * 2, 0.5)]
    before = json.dumps(rows)
    assert json.dumps(metrics.label_temperatures(rows)) == before
    assert metrics.plain_label("pld (T=0.7)") == "pld" and metrics.is_ar_label("ar (T=1)")


def test_the_gate_never_pairs_two_temperatures(tmp_path):
    from specbench_cli.report import gate

    rows = metrics.label_temperatures([{**r, "run_id": "r", "model": "m"} for r in _sweep_rows()])
    records = gate.question_records(rows)
    ratios = {(r["method_label"], r["question_id"]): r["ratio"] for r in records}
    assert ratios == {("pld (T=0)", "1"): pytest.approx(2.0), ("pld (T=0)", "2"): pytest.approx(2.0),
                      ("pld (T=1)", "1"): pytest.approx(8.0), ("pld (T=1)", "2"): pytest.approx(8.0)}


def test_report_of_a_sweep_folder(tmp_path, capsys):
    run = write_run(tmp_path / "20250501-120000-abcdef", _sweep_rows())
    code, _, err = cli(["report", str(run), "--no-plots"], capsys)
    assert code == 0, err
    for ext in ("md", "csv", "tex", "json"):
        text = (run / "report" / f"table.{ext}").read_text()
        assert "pld (T=1)" in text and "ar (T=0)" in text
