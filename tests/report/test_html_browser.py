"""`report --html` in a real browser: headless Chromium (Debian's `chromium`, installed by .ci/run)
opens the page, which must load nothing from outside, log no error, show one coloured span per
output token of every answer shown, follow the question picker and the method boxes, and
explain a token on hover. A screenshot is saved. Skipped only where no browser exists; under CI
(CI set) a missing browser fails instead.
"""

from __future__ import annotations

import os
import random

import pytest
from helpers.browser import Browser, find_chromium
from helpers.rows import synthetic_rows, write_run
from typer.testing import CliRunner

BROWSER = find_chromium()
if BROWSER is None:
    if os.environ.get("CI"):
        pytest.fail("CI must have a headless Chromium (.ci/run installs Debian's chromium)", pytrace=False)
    pytestmark = pytest.mark.skip(reason="no chromium on PATH (apt-get install chromium)")

WORDS = "the model drafts tokens and the target checks them in one pass\n".split(" ")


def with_pieces(rows: list[dict]) -> list[dict]:
    """Rows whose every output token has a text, as `specbench run` writes them."""
    for row in rows:
        rng = random.Random(f"{row['question_id']}-{row['turn']}")
        row["output_pieces"] = [(" " if i else "") + rng.choice(WORDS) for i in range(len(row["output_ids"]))]
    return rows


@pytest.fixture
def page(tmp_path):
    from specbench_cli.cli.main import app

    rows = with_pieces(synthetic_rows(seed=2, methods=("pld", "lookahead"), questions_per_category=2))
    first = next(r for r in rows if r["method"] == "pld")
    first["output_ids"] = [*first["output_ids"][:5], 10_000, *first["output_ids"][6:]]  # one token unlike AR's
    run = write_run(tmp_path / "run", rows)
    result = CliRunner().invoke(app, ["report", str(run), "--html", "-o", str(tmp_path / "report.html")])
    assert result.exit_code == 0, result.output
    return tmp_path / "report.html", rows, first


def shown(browser) -> dict:
    """The question on screen and, per answer card, its token spans by kind."""
    return browser.evaluate("""(() => ({
        question: document.getElementById('answers').dataset.question,
        cards: Array.from(document.querySelectorAll('#answers .answer')).map(card => ({
            method: card.dataset.method,
            spans: card.querySelectorAll('span.tok').length,
            prefill: card.querySelectorAll('span.tok.p').length,
            draft: card.querySelectorAll('span.tok.d').length,
            target: card.querySelectorAll('span.tok.b').length,
            differing: Array.from(card.querySelectorAll('span.tok')).flatMap((s, i) => s.classList.contains('x') ? [i] : []),
        })),
    }))()""")


def expected_tokens(rows: list[dict], question_key: str) -> dict[str, int]:
    """method label -> output tokens over all turns of the question (first repeat)."""
    task, qid = question_key.split("|")
    counts: dict[str, int] = {}
    for row in rows:
        if row["task"] == task and row["question_id"] == qid and row["repeat"] == 0:
            counts[row["method_label"]] = counts.get(row["method_label"], 0) + row["new_tokens"]
    return counts


def test_the_page_in_a_real_browser(page, tmp_path):
    path, rows, first = page
    with Browser(BROWSER) as browser:
        browser.open(path.as_uri())
        assert browser.errors() == []
        assert all(url.startswith(("file:", "data:", "about:")) for url in browser.requested()), browser.requested()

        view = shown(browser)
        want = expected_tokens(rows, view["question"])
        assert {c["method"]: c["spans"] for c in view["cards"]} == want
        for card in view["cards"]:
            turns = sum(1 for r in rows if r["method_label"] == card["method"] and
                        f"{r['task']}|{r['question_id']}" == view["question"])
            assert card["prefill"] == turns and card["prefill"] + card["draft"] + card["target"] == card["spans"]
        cards = {c["method"]: c for c in view["cards"]}
        assert cards["ar"]["draft"] == 0  # AR drafts nothing: every token is the target's
        assert cards["pld"]["draft"] > 0
        assert view["question"] == f"{first['task']}|{first['question_id']}"
        assert cards["pld"]["differing"] == [5] and cards["lookahead(W=5,N=3,G=3)"]["differing"] == []
        browser.screenshot(tmp_path / "report.png")

        # another question: the view follows the picker
        other = browser.evaluate("""(() => { const s = document.getElementById('question');
            s.value = String(s.options.length - 1); s.dispatchEvent(new Event('change'));
            return document.getElementById('answers').dataset.question; })()""")
        assert other != view["question"]
        view = shown(browser)
        assert view["question"] == other
        assert {c["method"]: c["spans"] for c in view["cards"]} == expected_tokens(rows, other)

        # a method box unticked: its answer leaves the view
        browser.evaluate("""(() => { const box = Array.from(document.querySelectorAll('#methods input'))
            .find(b => b.parentElement.textContent.trim() === 'pld'); box.checked = false;
            box.dispatchEvent(new Event('change', {bubbles: true})); })()""")
        assert "pld" not in {c["method"] for c in shown(browser)["cards"]}

        # hovering a draft token names its step, what it accepted and the draft's size
        hover = browser.evaluate("""(() => { const t = document.querySelector('#answers span.tok.d');
            t.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
            return [t.title, document.getElementById('hover-info').textContent]; })()""")
        assert hover[0] == hover[1] and hover[0].startswith("step ") and "drafted" in hover[0]
        assert browser.errors() == []

    png = (tmp_path / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_viewer_data_survives_text_that_looks_like_markup(tmp_path):
    """Answers are data, never markup: a token '</script><b>' shows as text."""
    from specbench_cli.cli.main import app

    rows = with_pieces(synthetic_rows(seed=3, methods=("pld",), questions_per_category=1))
    rows[0]["output_pieces"][1] = "</script><b id='injected'>x</b>"
    run = write_run(tmp_path / "run", rows)
    assert CliRunner().invoke(app, ["report", str(run), "--html", "-o", str(tmp_path / "r.html"),
                                    "--no-plots"]).exit_code == 0
    with Browser(BROWSER) as browser:
        browser.open((tmp_path / "r.html").as_uri())
        assert browser.errors() == []
        text = browser.evaluate("document.querySelector('#answers .answer span.tok:nth-child(2)').textContent")
        assert text == "</script><b id='injected'>x</b>"
        assert browser.evaluate("document.getElementById('injected')") is None


HOSTILE = ["<!--<script>", "</script>", "<!--", " a\u2028line\u2029break", "lone \ud800 surrogate", "&amp; <b>"]


def _sections(browser) -> dict:
    return browser.evaluate("""(() => ({
        headings: Array.from(document.querySelectorAll('h2, h3')).map(h => h.textContent),
        tables: document.querySelectorAll('table').length,
        figures: document.querySelectorAll('figure svg').length,
        conditions: document.querySelectorAll('dl.conditions dt').length,
        cards: document.querySelectorAll('#answers .answer').length,
        tokens: Array.from(document.querySelectorAll('#answers .answer span.tok')).map(s => s.textContent),
    }))()""")


def test_no_answer_text_can_blank_the_page(tmp_path):
    """An answer holding `<!--<script>` put the embedded data in the HTML parser's double-escaped
    state: the picker, every later table, figure and condition vanished and the viewer never ran;
    a lone surrogate made `report --html` exit 1. Now the page with such answers shows exactly what
    the page of the same run with plain answers shows, and the answers' text as text."""
    from specbench_cli.cli.main import app

    pages = {}
    for name, hostile in (("plain", False), ("hostile", True)):
        rows = with_pieces(synthetic_rows(seed=3, methods=("pld",), questions_per_category=1))
        if hostile:
            for row in rows:
                row["output_pieces"][1:1 + len(HOSTILE)] = HOSTILE
        run = write_run(tmp_path / name / "run", rows)  # one run id for both pages
        result = CliRunner().invoke(app, ["report", str(run), "--html", "-o", str(tmp_path / f"{name}.html")])
        assert result.exit_code == 0, result.output
        with Browser(BROWSER) as browser:
            browser.open((tmp_path / f"{name}.html").as_uri())
            assert browser.errors() == []
            pages[name] = _sections(browser)
    plain, hostile = pages["plain"], pages["hostile"]
    assert hostile["headings"] == plain["headings"] and "Conditions" in hostile["headings"]
    assert (hostile["tables"], hostile["figures"], hostile["conditions"]) == \
        (plain["tables"], plain["figures"], plain["conditions"])
    assert plain["figures"] > 0 and plain["conditions"] > 0 and hostile["cards"] == plain["cards"] > 0
    shown_text = [t.replace("\ud800", "\ufffd") for t in HOSTILE]
    assert hostile["tokens"][1:1 + len(HOSTILE)] == shown_text
