"""Texts a run folder carries (method labels, the model's name, categories) reach matplotlib, the
terminal, markdown, LaTeX, HTML and file names. A tampered label `pld $x^$` made `report` and
`report --html` exit 1 with a pyparsing dump (matplotlib parsed it as mathtext) and no page; a
label holding `[/]` crashed the terminal table (rich markup), ESC reached the terminal, a newline
broke the markdown row, 5000 characters made a figure 76,000 pixels wide and an answer file's
name too long to write. Each is now shown literally, on one line, cut where it must be.
"""

from __future__ import annotations

import html
import json
import re
import struct
from pathlib import Path

import matplotlib
import pytest
from helpers.cli import cli
from helpers.rows import synthetic_rows, write_run

from specbench_cli.report import metrics, plots
from specbench_cli.report.table import printable

LABELS = {
    "mathtext": "pld $x^$",
    "escaped-dollar": "pld \\$ \\ $$ \\frac{",
    "markup": "pld [/] [bold red]x",
    "newlines": "pld\nline two\r\n\n",
    "control": "pld\x1b[2J\x07\x00end",
    "html": "pld <script>alert(1)</script> & \"'",
    "underscore": "_nolegend_",
    "long": "pld-" + "x" * 5000,
    "bidi": "pld \u202eevil",
}
# the characters no terminal line, markdown row or figure may carry
UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _rows(labels: list[str], category: str = "qa") -> list[dict]:
    """ar + three drafters (one question per category), the drafters labelled `labels`; the qa
    rows' category is `category`."""
    rows = synthetic_rows(seed=1, methods=("pld", "sps", "lookahead"), questions_per_category=1)
    named = dict(zip(("pld", "sps", "lookahead"), labels))
    for row in rows:
        row["method_label"] = named.get(row["method"], row["method_label"])
        if row["category"] == "qa":
            row["category"] = category
    return rows


GROUPS = [("mathtext", "markup", "control"), ("newlines", "html", "long"), ("escaped-dollar", "underscore", "bidi")]


@pytest.mark.parametrize("names", GROUPS, ids=["-".join(g) for g in GROUPS])
def test_every_figure_draws_labels_literally(names):
    """Each figure the data supports, drawn (the mathtext parser ran here and raised): every
    legend entry and tick label is plain text that shows the labels' printable form, and the
    figure stays a few thousand pixels wide."""
    labels = [LABELS[n] for n in names]
    rows = [{**r, "run_id": "r", "model": labels[0], "target_params": None} for r in _rows(labels, category=labels[1])]
    rows += [{**r, "model": "other"} for r in rows]  # two models: legends name the model too
    summary = metrics.summarize(rows)
    drawn, everywhere = 0, []
    for stem, _, fig in plots.figures(rows, summary):
        fig.canvas.draw()
        texts = [t for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels(),
                                                 *(ax.get_legend().get_texts() if ax.get_legend() else []))]
        shown = [t.get_text() for t in texts]
        assert all(not matplotlib.cbook.is_math_text(s) for s in shown), (stem, shown)
        assert all(not UNPRINTABLE.search(s) for s in shown), (stem, shown)
        assert any(plots.plot_text(label) in s for s in shown for label in labels), (stem, shown)
        everywhere += shown
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        assert box.width * fig.dpi < 5000 and box.height * fig.dpi < 5000, (stem, box)
        matplotlib.pyplot.close(fig)
        drawn += 1
    assert drawn >= 4
    for label in labels:
        assert any(plots.plot_text(label) in s for s in everywhere), label


def test_plot_text_reads_back_as_the_label():
    """matplotlib shows `\\$` as `$`: the escaped text reads as the label (cut, on one line)."""
    for label in ("pld $x^$", "a \\$ b", "$$", "plain"):
        assert plots.plot_text(label).replace("\\$", "$") == label
    assert plots.plot_text("_hidden").strip() == "_hidden" and not plots.plot_text("_hidden").startswith("_")
    assert len(plots.plot_text("y" * 5000)) == plots.PLOT_LABEL_CHARS and plots.plot_text("y" * 5000).endswith("…")
    assert printable("a\nb\x1bc\u2028d") == "a b c d"


def _png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


@pytest.mark.parametrize("names", GROUPS, ids=["-".join(g) for g in GROUPS])
def test_report_shows_hostile_labels_in_every_format(tmp_path, capsys, names):
    """The terminal table, markdown, LaTeX, JSON and the HTML page (figures: the test above and
    the one below)."""
    labels = [LABELS[n] for n in names]
    run = write_run(tmp_path / "run", _rows(labels, category=labels[0]), model=labels[1])
    out_dir = tmp_path / "report"
    code, out, err = cli(["report", str(run), "--no-plots", "-o", str(out_dir)], capsys)
    assert code == 0, err
    assert "Traceback" not in err and not [line for line in err.splitlines() if line.startswith("error:")], err
    assert not UNPRINTABLE.search(out), "a control character reached the terminal"
    # markdown: every row of every table is whole (as many cells as its header), each label on one line
    md = (out_dir / "table.md").read_text(encoding="utf-8")
    assert not UNPRINTABLE.search(md)
    cells = lambda line: len(re.split(r"(?<!\\)\|", line))  # noqa: E731
    for table in md.split("\n\n"):
        rows = [line for line in table.splitlines() if line.startswith("|")]
        assert all(cells(line) == cells(rows[0]) for line in rows), table
    for label in labels:
        assert printable(label).replace("|", "\\|") in md
    tex = (out_dir / "table.tex").read_text(encoding="utf-8")
    assert not UNPRINTABLE.search(tex) and "\n\n" not in tex.split(r"\begin{tabular}")[1]
    assert json.loads((out_dir / "table.json").read_text(encoding="utf-8"))["cells"]

    code, _, err = cli(["report", str(run), "--html", "--no-plots", "-o", str(tmp_path / "page.html")], capsys)
    assert code == 0 and "Traceback" not in err, err
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page
    for label in labels:
        assert html.escape(printable(label), quote=True) in page


def test_report_and_its_page_draw_a_mathtext_label(tmp_path, capsys):
    """The case as found: `pld $x^$` ended `report` and `report --html` with exit 1 and a pyparsing
    dump. Now the figures are written and on the page, none past a few thousand pixels."""
    rows = synthetic_rows(seed=1, methods=("pld",), questions_per_category=1)
    run = write_run(tmp_path / "run", [{**r, "method_label": LABELS["mathtext"]} if r["method"] == "pld" else r
                                       for r in rows])
    code, _, err = cli(["report", str(run), "-o", str(tmp_path / "report")], capsys)
    assert code == 0 and "Traceback" not in err, err
    for stem in ("speedup_by_category", "accept_length_distribution", "position_acceptance"):
        width, height = _png_size(tmp_path / "report" / f"{stem}.png")
        assert width < 8000 and height < 8000, (stem, width, height)
        assert (tmp_path / "report" / f"{stem}.pdf").is_file()
    code, _, err = cli(["report", str(run), "--html", "-o", str(tmp_path / "page.html")], capsys)
    assert code == 0 and "Traceback" not in err, err
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert page.count("<svg") >= 3 and "pld $x^$" in page


def test_export_names_files_of_long_and_colliding_labels(tmp_path, capsys):
    """A 5000-character label made a file name too long to write (exit 1); 'a/b' and 'a_b' were
    written into one file."""
    run = write_run(tmp_path / "run", _rows(["pld-" + "x" * 5000, "a/b", "a_b"]))
    code, _, err = cli(["export", str(run), "-o", str(tmp_path / "answers")], capsys)
    assert code == 0, err
    files = sorted(p.name for p in (tmp_path / "answers").iterdir())
    assert len(files) == 4 and all(len(name) <= 140 for name in files), files
    models = {json.loads(p.read_text().splitlines()[0])["model_id"] for p in (tmp_path / "answers").iterdir()}
    assert models == {f"smollm2-135m-{label}" for label in ("ar", "pld-" + "x" * 5000, "a/b", "a_b")}
