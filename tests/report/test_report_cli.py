"""report / check / baseline / compare / export through Typer, on synthetic run folders.

Each test runs against a local Typer app with `register(app)` and, once `specbench_cli.cli.main`
exists, against the real app too. `app.main` maps `SpecBenchError` to its exit code; here
`invoke` does the same with the exception CliRunner captured.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from helpers.rows import make_row, synthetic_rows, write_run
from typer.testing import CliRunner

from specbench_cli.cli.report import register
from specbench_cli.errors import SpecBenchError
from specbench_cli.report import metrics as m
from specbench_cli.report.baseline import check_entries
from specbench_cli.store.runfolder import all_rows, load_runs


def local_app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def real_app() -> typer.Typer:
    try:
        from specbench_cli.cli.main import app
    except ImportError as exc:
        pytest.skip(f"specbench_cli.cli.main not importable yet: {exc}")
    names = {cmd.name or cmd.callback.__name__ for cmd in app.registered_commands}
    missing = {"report", "check", "baseline", "compare", "export"} - names
    assert not missing, f"app.py must call specbench_cli.cli.report.register(app); missing {sorted(missing)}"
    return app


@pytest.fixture(params=["local", "real"])
def app(request) -> typer.Typer:
    return local_app() if request.param == "local" else real_app()


@pytest.fixture
def plots_flag(request) -> list[str]:
    """Draw figures with the local app only: they are slow, and one pass covers them."""
    return [] if "[local]" in request.node.name else ["--no-plots"]


def invoke(app: typer.Typer, *args) -> tuple[int, str]:
    """Run a command; return (exit code as `specbench` would give it, stdout + stderr)."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    exc = result.exception
    if isinstance(exc, SpecBenchError):
        return exc.exit_code, f"{result.output}{exc}"
    if exc is not None and not isinstance(exc, SystemExit):
        raise exc
    return result.exit_code, result.output


@pytest.fixture
def run_a(tmp_path) -> Path:
    return write_run(tmp_path / "run_a", synthetic_rows(seed=1, methods=("pld", "sps"), questions_per_category=1))


def slowed(rows: list[dict], method: str, factor: float) -> list[dict]:
    """The same rows with `method` taking `factor` times as long."""
    return [{**row, "wall_time": row["wall_time"] * factor} if row["method"] == method else row for row in rows]


# ----------------------------------------------------------------------------- report


def test_report_writes_tables_and_plots(app, run_a, plots_flag):
    code, output = invoke(app, "report", run_a, "--columns", "bc,mbsu", *plots_flag)
    assert code == 0, output
    assert "pld" in output and "sps(k=4)" in output
    files = {p.name for p in (run_a / "report").iterdir()}
    assert {"table.md", "table.csv", "table.tex", "table.json"} <= files
    figures = {"speedup_by_category.png", "speedup_by_category.pdf", "accept_length_distribution.png",
               "position_acceptance.pdf"}
    assert figures <= files if not plots_flag else not figures & files
    assert "| MBSU |" in (run_a / "report" / "table.md").read_text()


def test_the_same_run_folder_gives_the_same_bytes(app, run_a, tmp_path):
    """Reports are rebuilt from result files alone: rendered twice, a second apart, every file
    (tables, PNG and PDF figures, the HTML page with its SVG figures) is byte for byte the same;
    matplotlib would otherwise write each rendering's time and random SVG ids into them."""
    import time

    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        assert invoke(app, "report", run_a, "-o", out)[0] == 0
        assert invoke(app, "report", run_a, "--html", "-o", out / "page.html")[0] == 0
        outs.append({p.name: p.read_bytes() for p in out.iterdir()})
        time.sleep(1.1)  # a PDF's date has one-second resolution
    assert {"speedup_by_category.pdf", "page.html"} <= set(outs[0])
    assert outs[0] == outs[1]


def test_report_format_prints_that_format_only(app, run_a, tmp_path):
    code, output = invoke(app, "report", run_a, "--format", "latex", "-o", tmp_path / "out", "--no-plots")
    assert code == 0, output
    assert output.startswith(r"\documentclass{article}")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["table.tex"]


def test_report_several_runs_adds_bc(app, tmp_path):
    a = write_run(tmp_path / "bc4", synthetic_rows(questions_per_category=1, block_complexity=4))
    b = write_run(tmp_path / "bc16", synthetic_rows(questions_per_category=1, block_complexity=16))
    code, output = invoke(app, "report", a, b, "--format", "csv", "--no-plots", "-o", tmp_path / "out")
    assert code == 0, output
    csv_lines = [line for line in output.splitlines() if "," in line]  # output also holds stderr
    assert csv_lines[0].startswith("method_label,block_complexity,")
    assert [line.split(",")[1] for line in csv_lines[1:3]] == ["4", "16"]
    assert len(csv_lines) == 1 + 2 * 4  # header + (ar, pld, sps, lookahead) x 2 BCs


@pytest.mark.parametrize("args, message", [
    (["--format", "html"], "unknown format"),
    (["--columns", "speed"], "unknown column"),
])
def test_report_bad_options_exit_2(app, run_a, args, message):
    code, output = invoke(app, "report", run_a, "--no-plots", *args)
    assert code == 2 and message in output


def test_report_refuses_a_missing_folder_and_skips_a_damaged_line(app, tmp_path, run_a):
    assert invoke(app, "report", tmp_path / "missing")[0] == 2
    lines = (run_a / "samples.jsonl").read_text().splitlines()
    lines[4] = "{oops"
    (run_a / "samples.jsonl").write_text("\n".join(lines) + "\n")
    code, output = invoke(app, "report", run_a, "--no-plots")
    assert code == 0 and "samples.jsonl:5: not valid JSON" in output


def test_report_tolerates_truncated_last_line(app, run_a):
    with open(run_a / "samples.jsonl", "a") as f:
        f.write('{"method": "pld", "method_la')
    code, output = invoke(app, "report", run_a, "--no-plots", "--format", "markdown")
    assert code == 0 and "truncated final line" in output


# ----------------------------------------------------------------------------- baseline / check


def make_baseline(app, run: Path, path: Path) -> dict:
    code, output = invoke(app, "baseline", run, "-o", path)
    assert code == 0, output
    return json.loads(path.read_text())


def test_baseline_contents(app, run_a, tmp_path):
    doc = make_baseline(app, run_a, tmp_path / "base.json")
    summary = m.summarize(all_rows(load_runs([run_a])))
    assert len(doc["entries"]) == len(summary) == 3 * 7  # (ar, pld, sps) x (6 categories + overall)
    entry = next(e for e in doc["entries"] if e["method_label"] == "pld" and e["category"] == "overall")
    row = summary[(summary["method_label"] == "pld") & (summary["category"] == "overall")].iloc[0]
    assert entry["mat"] == pytest.approx(row["mat"]) and entry["speedup"] == pytest.approx(row["speedup"])
    assert entry["n"] == 6 and entry["block_complexity"] == 8 and entry["model"] == "smollm2-135m"


def test_check_same_run_passes(app, run_a, tmp_path):
    make_baseline(app, run_a, tmp_path / "base.json")
    code, output = invoke(app, "check", run_a, "--baseline", tmp_path / "base.json")
    assert code == 0 and "within tolerance" in output


def test_check_speedup_drop_fails_rise_passes(app, run_a, tmp_path):
    make_baseline(app, run_a, tmp_path / "base.json")
    rows = [json.loads(line) for line in (run_a / "samples.jsonl").read_text().splitlines()]
    slow = write_run(tmp_path / "slow", slowed(rows, "pld", 1.5))  # every pld ratio / 1.5 = -33%
    code, output = invoke(app, "check", slow, "--baseline", tmp_path / "base.json")
    # every question moved alike, so every resample does too: the interval is the point
    assert code == 1 and "FAIL pld (BC 8) is slower: -33.3%, interval [-33.3%, -33.3%]" in output
    assert "1 statistical or exact check(s) failed" in output and "FAIL sps" not in output  # sps did not move
    assert invoke(app, "check", slow, "--baseline", tmp_path / "base.json", "--speedup-tol", "0.4")[0] == 0
    fast = write_run(tmp_path / "fast", slowed(rows, "pld", 0.5))
    code, output = invoke(app, "check", fast, "--baseline", tmp_path / "base.json")
    assert code == 0 and "faster" in output and "+100.0%" in output


def test_check_mat_change_fails_both_ways(app, run_a, tmp_path):
    make_baseline(app, run_a, tmp_path / "base.json")
    rows = [json.loads(line) for line in (run_a / "samples.jsonl").read_text().splitlines()]
    for factor in (0.9, 1.1):  # steps scaled -> #MAT moves by about 1/factor
        changed = [{**row, "steps": round(row["steps"] * factor)} if row["method"] == "sps" else row for row in rows]
        code, output = invoke(app, "check", write_run(tmp_path / f"mat{factor}", changed),
                              "--baseline", tmp_path / "base.json")
        assert code == 1 and "#MAT" in output and "sps(k=4)" in output


def test_check_missing_method_is_a_regression(app, run_a, tmp_path):
    make_baseline(app, run_a, tmp_path / "base.json")
    rows = [json.loads(line) for line in (run_a / "samples.jsonl").read_text().splitlines()]
    fewer = write_run(tmp_path / "fewer", [row for row in rows if row["method"] != "sps"])
    code, output = invoke(app, "check", fewer, "--baseline", tmp_path / "base.json")
    assert code == 1 and "7 of 21 baseline entries regressed" in output
    summary = m.summarize(all_rows(load_runs([fewer])))
    moved = check_entries(summary, json.loads((tmp_path / "base.json").read_text())["entries"], 0.02, 0.25)
    assert {(rec["method_label"], tuple(rec["problems"])) for rec in moved} == {
        ("sps(k=4)", ("missing from run",))}


def test_check_bad_input_exits_2(app, run_a, tmp_path):
    assert invoke(app, "check", run_a, "--baseline", tmp_path / "nope.json")[0] == 2
    (tmp_path / "bad.json").write_text("{")
    assert invoke(app, "check", run_a, "--baseline", tmp_path / "bad.json")[0] == 2
    (tmp_path / "other.json").write_text(json.dumps({"entries": []}))
    code, output = invoke(app, "check", run_a, "--baseline", tmp_path / "other.json")
    assert code == 2 and "not a specbench baseline" in output
    make_baseline(app, run_a, tmp_path / "base.json")
    assert invoke(app, "check", tmp_path / "no_run", "--baseline", tmp_path / "base.json")[0] == 2
    assert invoke(app, "check", run_a, "--baseline", tmp_path / "base.json", "--mat-tol", "-1")[0] == 2


# ----------------------------------------------------------------------------- compare


def test_compare_shows_relative_change(app, run_a, tmp_path):
    rows = [json.loads(line) for line in (run_a / "samples.jsonl").read_text().splitlines()]
    faster = write_run(tmp_path / "faster", slowed(rows, "pld", 1 / 1.34))  # pld speedup +34%
    code, output = invoke(app, "compare", run_a, faster)
    assert code == 0, output
    assert "(+34% ↑)" in output and "(±0% =)" in output  # pld moved, sps did not
    other_model = write_run(tmp_path / "other", rows, model="other-model")
    assert invoke(app, "compare", run_a, other_model)[0] == 2


# ----------------------------------------------------------------------------- export


def spec_bench_speed(answer_file: Path, baseline_file: Path) -> tuple[float, float]:
    """Spec-Bench's evaluation/speed.py, minus the tokenizer: (#MAT, speedup).

    speed.py re-tokenizes the baseline's answers to count tokens; the exported
    `new_tokens` are those counts.
    """
    speeds, accept_lengths = [], []
    for line in answer_file.read_text().splitlines():
        choice = json.loads(line)["choices"][0]
        speeds.append(sum(choice["new_tokens"]) / sum(choice["wall_time"]))
        accept_lengths.extend(choice["accept_lengths"])
    speeds0 = []
    for line in baseline_file.read_text().splitlines():
        choice = json.loads(line)["choices"][0]
        speeds0.append(sum(choice["new_tokens"]) / sum(choice["wall_time"]))
    return float(np.mean(accept_lengths)), float(np.array(speeds).mean() / np.array(speeds0).mean())


def test_export_matches_spec_bench_scoring(app, run_a, tmp_path):
    code, output = invoke(app, "export", run_a, "--format", "spec-bench", "-o", tmp_path / "answers")
    assert code == 0, output
    files = {p.name: p for p in (tmp_path / "answers").iterdir()}
    assert set(files) == {"smollm2-135m-ar.jsonl", "smollm2-135m-pld.jsonl", "smollm2-135m-sps_k=4_.jsonl"}
    summary = m.summarize(all_rows(load_runs([run_a])))
    for label, name in (("pld", "smollm2-135m-pld.jsonl"), ("sps(k=4)", "smollm2-135m-sps_k=4_.jsonl")):
        mat, speedup = spec_bench_speed(files[name], files["smollm2-135m-ar.jsonl"])
        row = summary[(summary["method_label"] == label) & (summary["category"] == "overall")].iloc[0]
        assert mat == pytest.approx(row["mat"]) and speedup == pytest.approx(row["speedup"])


def test_export_line_format(app, tmp_path):
    rows = [make_row("ar", 81, [1] * 4, 1.0, category="writing", turn=t) for t in (0, 1)]
    rows += [make_row("pld", 81, [2, 3], 0.5, category="writing", turn=0, draft_sizes=[3, 3]),
             make_row("pld", 81, [1, 4], 0.5, category="writing", turn=1, draft_sizes=[3, 3]),
             make_row("pld", 82, [2], 0.5, category="writing", turn=0),
             make_row("pld", 82, [], 0.0, category="writing", turn=1, status="error")]
    run = write_run(tmp_path / "r", rows)
    code, output = invoke(app, "export", run, "-o", tmp_path / "out")
    assert code == 0 and "left out 1 question" in output
    (line,) = [json.loads(x) for x in (tmp_path / "out" / "smollm2-135m-pld.jsonl").read_text().splitlines()]
    assert line["question_id"] == 81 and line["category"] == "writing" and line["model_id"] == "smollm2-135m-pld"
    choice = line["choices"][0]
    assert choice["index"] == 0 and choice["turns"] == ["answer 81.0", "answer 81.1"]
    assert choice["new_tokens"] == [6, 6] and choice["wall_time"] == [0.5, 0.5]
    assert choice["accept_lengths"] == [2, 3, 1, 4] and choice["decoding_steps"] == [2, 2]
    assert isinstance(line["tstamp"], float) and len(line["answer_id"]) == 22


def test_export_bad_format_exits_2(app, run_a, tmp_path):
    assert invoke(app, "export", run_a, "--format", "mt-bench", "-o", tmp_path / "x")[0] == 2
