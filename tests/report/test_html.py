"""`report --html` without a browser: what the page holds, where token texts come from, bad flags.
(tests/report/test_html_browser.py opens the page in headless Chromium.)"""

from __future__ import annotations

import json
import re

import pytest
from helpers.rows import synthetic_rows, write_run
from typer.testing import CliRunner

from specbench_cli.models.pieces import token_pieces
from specbench_cli.report.html import differing, step_of_tokens


def _cli(*args) -> tuple[int, str]:
    from specbench_cli.cli.main import app
    from specbench_cli.errors import SpecBenchError

    result = CliRunner().invoke(app, [str(a) for a in args])
    if isinstance(result.exception, SpecBenchError):
        return result.exception.exit_code, " ".join(f"{result.output}{result.exception}".split())
    return result.exit_code, " ".join(result.output.split())


def viewer_data(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="viewer-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


def test_each_token_knows_its_step_and_kind():
    # prefill, then a step that accepted 2 drafts (+ the target's token), a plain step, one more of 2
    assert step_of_tokens(7, [3, 1, 2]) == ([0, 1, 1, 1, 2, 3, 3], "pddbbdb")
    assert step_of_tokens(5, [3, 1, 2]) == ([0, 1, 1, 1, 2], "pddbb")  # the last step overshot the cap
    assert step_of_tokens(4, [1]) == ([0, 1, -1, -1], "pbee")  # tokens after the loop: a lossy epilogue
    assert differing([1, 2, 3, 4], [1, 9, 3]) == [1, 3] and differing([1], None) is None


@pytest.fixture
def run_with_pieces(tmp_path):
    rows = synthetic_rows(seed=7, methods=("pld",), questions_per_category=1)
    for row in rows:
        row["output_pieces"] = [f" t{i}" for i in range(len(row["output_ids"]))]
    return write_run(tmp_path / "run", rows), rows


def test_the_page_is_self_contained_and_holds_the_reports_tables(run_with_pieces, tmp_path):
    run, rows = run_with_pieces
    code, output = _cli("report", run, "--html", "-o", tmp_path / "out" / "page.html")
    assert code == 0, output
    page = (tmp_path / "out" / "page.html").read_text(encoding="utf-8")
    # nothing is fetched: no external scripts, styles, images or fonts; SVG links are in-page anchors
    assert not re.search(r"<(link|img|iframe)\b|@import|url\((?!#)|\bsrc=", page)
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))
    for header in ("=AR", "Median", "#MAT", "AL with bonus", "p1"):
        assert f">{header}<" in page
    assert page.count("<svg") >= 3  # speedup, accepted lengths, per-position acceptance
    assert "Conditions" in page and "float32 on cpu, 4 thread(s)" in page
    data = viewer_data(page)
    assert [m["label"] for m in data["methods"]] == ["ar", "pld"] and len(data["questions"]) == 6
    pld = rows[1]
    turn = data["answers"][f"spec_bench|{pld['question_id']}"][f"{run.name}|pld"][0]
    assert turn["t"] == pld["output_pieces"] and len(turn["k"]) == len(pld["output_ids"])
    assert turn["a"] == pld["accept_lengths"] and turn["same"] is True


def test_a_busy_run_gets_a_warning_on_the_page(run_with_pieces, tmp_path):
    run, _ = run_with_pieces
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["timing_conditions"] = [{"threads": 2, "started": "s", "finished": "f", "load_start": [1.0, 1, 1],
                                      "load_end": [5.0, 1, 1], "load_max_1min": 5.5}]
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert _cli("report", run, "--html", "--no-plots")[0] == 0
    page = (run / "report" / "report.html").read_text(encoding="utf-8")
    assert 'class="busy"' in page and "load average up to 5.5 with 2 thread(s)" in page


def test_an_older_run_takes_its_token_texts_from_its_manifests_tokenizer(tmp_path, tiny_tok, tiny_model_dir):
    ids = tiny_tok.encode("the cat sat on the mat and the dog", add_special_tokens=False)
    rows = synthetic_rows(seed=8, methods=("pld",), questions_per_category=1)
    for row in rows:  # rows as written before per-token text existed: ids only
        row["output_ids"] = (ids * 40)[: len(row["output_ids"])]
    run = write_run(tmp_path / "run", rows, model=str(tiny_model_dir))
    code, output = _cli("report", run, "--html", "--no-plots", "-o", tmp_path / "page.html")
    assert code == 0, output
    turn = next(iter(next(iter(viewer_data((tmp_path / "page.html").read_text())["answers"].values())).values()))[0]
    assert turn["t"] == token_pieces(tiny_tok, rows[0]["output_ids"])


def test_without_its_tokenizer_an_older_run_has_no_viewer_and_a_note(tmp_path):
    rows = synthetic_rows(seed=9, methods=("pld",), questions_per_category=1)
    run = write_run(tmp_path / "run", rows, model=str(tmp_path / "gone"))
    code, output = _cli("report", run, "--html", "--no-plots", "-o", tmp_path / "page.html")
    assert code == 0 and "answers of run are not shown" in output
    page = (tmp_path / "page.html").read_text()
    assert "viewer-data" not in page and "could not be loaded" in page and "Speedup over AR" in page


@pytest.mark.parametrize("args, message", [
    (["--html", "--format", "csv"], "--html writes a page, --format a table file: choose one"),
    (["--html", "-o", "{tmp}"], "is a folder; give a file path"),
])
def test_bad_html_flags_exit_2(run_with_pieces, tmp_path, args, message):
    run, _ = run_with_pieces
    code, output = _cli("report", run, *[a.format(tmp=tmp_path) for a in args])
    assert code == 2 and message in output


def test_embedded_data_is_inert_in_a_script_and_always_writable():
    """No '<', '>', '&', U+2028 or U+2029 survives in the embedded JSON (the HTML parser cannot see
    '</script' or '<!--<script' in it), lone surrogates become U+FFFD, and it still parses back."""
    import json

    from specbench_cli.report.html import script_json, without_surrogates

    text = "<!--<script></script><!-- & \u2028\u2029 \ud800 \udfff"
    blob = script_json({"t": [text], text: 1})
    assert not any(c in blob for c in "<>&\u2028\u2029") and blob.encode("utf-8")
    assert json.loads(blob) == {"t": [without_surrogates(text)], without_surrogates(text): 1}
    assert without_surrogates(text).count("\ufffd") == 2
