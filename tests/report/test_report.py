"""Tables in every format, the relative view, LaTeX structure (and a real compile), plots."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import subprocess

import pandas as pd
import pytest
from helpers.rows import TARGET_PARAMS, make_row, synthetic_rows

from specbench_cli.report import metrics as m
from specbench_cli.report import render as rn
from specbench_cli.report import table as r


def tag(rows, run_id="r1", model="smollm2-135m"):
    """Rows as `Run.tagged_rows` returns them."""
    return [{**row, "run_id": run_id, "model": model, "target_params": TARGET_PARAMS} for row in rows]


def small_rows(pld_time_qa=0.5, repeats=1):
    """AR at 10 tok/s on one qa and one rag question; pld 2x faster on qa, 1x on rag."""
    rows = []
    for repeat in range(repeats):
        rows += [
            make_row("ar", 1, [1] * 9, 1.0, category="qa", repeat=repeat),
            make_row("ar", 2, [1] * 9, 1.0, category="rag", repeat=repeat),
            make_row("pld", 1, [2] * 4 + [1], pld_time_qa * (1 + repeat / 10), category="qa", repeat=repeat,
                     draft_sizes=[3] * 5, ar_match=True),
            make_row("pld", 2, [3] * 3, 1.0, category="rag", repeat=repeat, draft_sizes=[3] * 3, ar_match=True),
        ]
    return tag(rows)


@pytest.fixture
def table():
    return r.spec_bench_table(m.summarize(small_rows()))


def test_format_value_and_relative_change():
    assert r.format_value(2.3149) == "2.31"
    assert r.format_value(2.3149, 0.041) == "2.31 ± 0.04"
    assert r.format_value(float("nan")) == r.MISSING and r.format_value(None) == r.MISSING
    assert r.relative_change(1.5, 2.01) == "+34% ↑"
    assert r.relative_change(2.0, 1.5) == "-25% ↓"
    assert r.relative_change(2.0, 2.004) == "±0% ="
    assert r.relative_change(float("nan"), 1.0) == r.MISSING


def test_spec_bench_table_layout_and_values(table):
    assert table.headers == ["Method", "QA", "RAG", "#MAT", "Tok/s", "Overall"]
    cells = dict((row[0], row) for row in table.cells())
    assert cells["ar"] == ["ar", "1.00", "1.00", "1.00", "10.0", "1.00"]
    # pld: qa 20 tok/s vs 10 -> 2.00; rag 10 tokens in 1 s -> 1.00; #MAT (9+9)/(5+3) = 2.25;
    # tok/s mean(20, 10) = 15.0; overall mean(20, 10) / mean(10, 10) = 1.50
    assert cells["pld"] == ["pld", "2.00", "1.00", "2.25", "15.0", "1.50"]


def test_optional_columns_and_repeats():
    table = r.spec_bench_table(m.summarize(small_rows(repeats=2)), ["bc", "mbsu", "params"])
    assert table.headers == ["Method", "BC", "Params", "QA", "RAG", "#MAT", "MBSU", "Tok/s", "Overall"]
    pld = next(c for c in table.cells() if c[0] == "pld")
    assert re.fullmatch(r"\d\.\d\d ± \d\.\d\d", pld[3])  # speedup per repeat differs -> ± std
    assert pld[6] == pld[5]  # draft-free: MBSU = #MAT
    assert any("replicates" in note for note in table.notes)
    with pytest.raises(ValueError, match="unknown column"):
        r.spec_bench_table(m.summarize(small_rows()), ["nope"])


def test_alpha_columns_for_chain_drafters_only():
    """pld accepts 1,1,1,1,0 (qa) and 2,2,2 (rag) draft tokens of 3: 1-α 7/8, 2-α 3/7, 3-α 0/3."""
    rows = small_rows() + tag([{**make_row("eagle", 1, [3, 1], 1.0, draft_sizes=[9, 9]), "structure": "tree"}])
    table = r.spec_bench_table(m.summarize(rows), ["alpha"])
    assert table.headers == ["Method", "QA", "RAG", "#MAT", "1-α", "2-α", "3-α", "Tok/s", "Overall"]
    cells = {row[0]: row for row in table.cells()}
    assert cells["pld"][4:7] == ["0.88", "0.43", "0.00"]
    assert cells["ar"][4:7] == cells["eagle"][4:7] == [r.MISSING] * 3  # AR and trees: no n-α


def test_bc_column_appears_when_a_method_has_several_bcs():
    rows = small_rows() + tag([{**row, "block_complexity": 16} for row in small_rows()], run_id="r2")
    table = r.spec_bench_table(m.summarize(rows))
    assert table.headers[:2] == ["Method", "BC"]
    assert [c[:2] for c in table.cells()] == [["ar", "8"], ["ar", "16"], ["pld", "8"], ["pld", "16"]]


def test_notes_flag_errors_and_mismatches():
    rows = small_rows() + tag([make_row("pld", 3, [], 0, category="qa", status="error"),
                               make_row("pld", 4, [2], 1.0, category="qa", ar_match=False)])
    notes = " ".join(r.spec_bench_table(m.summarize(rows)).notes)
    assert "1 of 4 rows errored" in notes
    assert "1 of 3 outputs differ from AR although it claims to be lossless" in notes
    assert "speedup over 2 of 3 questions" in notes


def test_markdown(table):
    text = rn.to_markdown(table)
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert lines[0] == "| Method | QA | RAG | #MAT | Tok/s | Overall |"
    assert lines[1] == "| :--- | ---: | ---: | ---: | ---: | ---: |"
    assert all(line.count("|") == 7 for line in lines) and len(lines) == 4


def test_csv_is_numeric(table):
    frame = pd.read_csv(io.StringIO(rn.to_csv(table)))
    pld = frame.set_index("method_label").loc["pld"]
    assert pld["speedup_qa"] == pytest.approx(2.0) and pld["mat"] == pytest.approx(2.25)
    assert pld["speedup_overall"] == pytest.approx(1.5)
    assert "speedup_std_overall" in frame.columns


def test_json_has_table_summary_and_no_nan(table):
    summary = m.summarize(small_rows())
    text = rn.to_json(table, summary)
    assert "NaN" not in text
    doc = json.loads(text)
    assert doc["headers"] == table.headers and doc["cells"] == table.cells()
    assert len(doc["summary"]) == len(summary)
    pld = next(row for row in doc["rows"] if row["method_label"] == "pld")
    assert pld["speedup_std_overall"] is None


def test_render_rejects_unknown_format(table):
    from specbench_cli.errors import UsageError

    with pytest.raises(UsageError, match="unknown format 'html'.*Known: csv, json, latex, markdown"):
        rn.render(table, "html")


NASTY_LABEL = "tree_50%&#{x}~^\\"


def nasty_table():
    """A table whose method label holds every LaTeX special character, with ± cells."""
    rows = [{**row, "method_label": NASTY_LABEL} if row["method"] == "pld" else row for row in small_rows(repeats=2)]
    return r.spec_bench_table(m.summarize(rows), ["bc", "mbsu", "params"])


def test_latex_structure_and_escaping():
    tex = rn.to_latex(nasty_table())
    for env in ("document", "table", "tabular"):
        assert tex.count(rf"\begin{{{env}}}") == tex.count(rf"\end{{{env}}}") == 1
    assert tex.count("{") - tex.count(r"\{") == tex.count("}") - tex.count(r"\}")
    spec = re.search(r"\\begin\{tabular\}\{([lrc]+)\}", tex).group(1)
    table_rows = [line for line in tex.splitlines() if line.endswith(r"\\")]
    assert len(table_rows) == 3  # header + ar + the nasty method
    for line in table_rows:
        assert len(re.split(r"(?<!\\)&", line)) == len(spec)
    assert r"tree\_50\%\&\#\{x\}\textasciitilde{}\textasciicircum{}\textbackslash{}" in tex
    assert "±" not in tex and r"$\pm$" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed (apt-get install texlive-latex-base)")
def test_latex_compiles(tmp_path):
    (tmp_path / "table.tex").write_text(rn.to_latex(nasty_table()), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "table.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert (tmp_path / "table.pdf").stat().st_size > 1000


def test_comparison_table_relative_view():
    a = m.summarize(small_rows(pld_time_qa=0.5))
    b = m.summarize(small_rows(pld_time_qa=0.25))  # qa: 2.00 -> 4.00
    table = r.comparison_table(a, b, "speedup")
    assert table.headers == ["Method", "QA", "RAG", "Overall"]
    (pld,) = table.cells()  # AR (speedup 1 by definition) is left out
    assert pld[1] == "2.00 → 4.00 (+100% ↑)"
    assert pld[2] == "1.00 → 1.00 (±0% =)"
    mat = r.comparison_table(a, b, "mat")
    assert [c[0] for c in mat.cells()] == ["ar", "pld"]


def test_comparison_without_common_rows_fails():
    a = m.summarize(small_rows())
    b = m.summarize(tag(small_rows(), model="other"))
    with pytest.raises(ValueError, match="share no"):
        r.comparison_table(a, b)


def test_rich_table_prints_all_rows(capsys):
    table = r.spec_bench_table(m.summarize(small_rows(repeats=2)))
    r.print_table(table)
    printed = capsys.readouterr().out
    assert "pld" in printed and "±" in printed and "note:" in printed


# ----------------------------------------------------------------------------- plots


def test_write_plots(tmp_path):
    from specbench_cli.report import plots


    # the least data that calls for all four figures: one chain drafter at two BCs
    rows = tag(synthetic_rows(methods=("pld",), questions_per_category=1, block_complexity=4), run_id="a") + \
        tag(synthetic_rows(seed=3, methods=("pld",), questions_per_category=1, block_complexity=16), run_id="b")
    written = plots.write_plots(rows, m.summarize(rows), tmp_path)
    stems = {p.stem for p in written}
    assert stems == {"speedup_by_category", "mat_vs_block_complexity", "accept_length_distribution",
                     "position_acceptance", "conditional_acceptance"}
    for path in written:
        head = path.read_bytes()[:8]
        assert head.startswith(b"\x89PNG") if path.suffix == ".png" else head.startswith(b"%PDF")


def test_plots_skip_what_the_data_cannot_show(tmp_path, monkeypatch):
    from specbench_cli.report import plots

    for name in ("draw_speedup_by_category", "draw_mat_vs_block_complexity", "draw_accept_length_distribution",
                 "draw_position_acceptance", "draw_conditional_acceptance"):  # record the choice, skip the drawing
        monkeypatch.setattr(plots, name, lambda *args, _name=name, **kwargs: _name)
    monkeypatch.setattr(plots, "save_figure", lambda fig, directory, stem: [fig])
    rows = small_rows()  # one BC; pld without structure info counts as a chain
    assert plots.write_plots(rows, m.summarize(rows), tmp_path) == [
        "draw_speedup_by_category", "draw_accept_length_distribution", "draw_position_acceptance",
        "draw_conditional_acceptance"]
    trees = [{**row, "method_params": {"structure": "tree"}} for row in rows]  # no recorded draft paths either
    assert plots.write_plots(trees, m.summarize(trees), tmp_path) == [
        "draw_speedup_by_category", "draw_accept_length_distribution"]
    ar_only = [row for row in rows if row["method"] == "ar"]
    assert plots.write_plots(ar_only, m.summarize(ar_only), tmp_path) == []


def test_series_colors_shade_bcs_of_one_method():
    from specbench_cli.report import plots

    keys = [("m", "pld", 4), ("m", "pld", 16), ("m", "sps", 8)]
    light, dark, other = plots.series_colors(keys)
    assert sum(light) > sum(dark)  # smaller BC is lighter
    assert dark == pytest.approx(plots.method_palette(keys)[("m", "pld")])
    assert other != dark and not math.isnan(sum(other))


def _render(table, width: int) -> tuple[str, list[str]]:
    """What a terminal of `width` columns shows, and the headers hidden to fit it."""
    from rich.console import Console

    grid, dropped = r.fit_table(table, width)
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(grid)
    return console.file.getvalue(), dropped


def test_terminal_table_fits_80_columns_with_every_column():
    """The run's default table (6 categories, Median, =AR; a long method label) on 80 columns."""
    rows = [{**row, "method_label": "mask-probe(mean,m=2)"} if row["method"] == "sps" else row
            for row in tag(synthetic_rows(questions_per_category=1))]
    table = r.spec_bench_table(m.summarize(rows), columns=["median", "agree"])
    assert len(table.columns) == 12
    text, dropped = _render(table, 80)
    assert dropped == [] and "mask-probe" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if "#MAT" in line)
    for shown in ("Method", "MT", "Trans.", "Sum.", "QA", "Math", "RAG", "#MAT", "tok/s", "Overall", "Median", "=AR"):
        assert shown in header.split(), shown


@pytest.mark.parametrize("width", [70, 60, 45])
def test_narrow_terminal_hides_least_important_columns_never_ar_agreement(width):
    rows = tag(synthetic_rows(questions_per_category=1))
    table = r.spec_bench_table(m.summarize(rows), columns=["median", "agree", "mbsu"])
    text, dropped = _render(table, width)
    header = next(line for line in text.splitlines() if "#MAT" in line).split()
    assert dropped and dropped[0] == "Median"  # least important goes first
    for kept in ("Method", "#MAT", "Overall", "=AR"):
        assert kept in header
    assert not set(dropped) & set(header)
    assert max(len(line) for line in text.splitlines()) <= width
