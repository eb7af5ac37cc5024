"""A run folder stays readable. Nothing non-finite, negative or of the wrong type is ever written
into a row: `RunFolder.append` stores such a row as an error row naming the field. A folder that
already holds such a line (an older version wrote it, a crash cut it, someone edited it) is still
reported, exported, compared and resumed: the line is named (file:line and field) in one warning
and skipped, counted as not run, so `--resume` runs that turn again. Damage to the folder itself
(no manifest, a broken one, no samples.jsonl) stays one `error:` line, exit 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args
from helpers.rows import make_row, manifest, synthetic_rows, write_run

from specbench_cli.store.rows import problem
from specbench_cli.store.runfolder import RunFolder, load_run

NAN, INF = float("nan"), float("inf")


def _rows() -> list[dict]:
    """ar + pld over one question per category (mt_bench with two turns): 14 rows."""
    return synthetic_rows(seed=1, methods=("pld",), questions_per_category=1)


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def _no_constant(name: str):
    raise AssertionError(f"{name} written into a row")


def _no_error_line(err: str) -> None:
    assert not [line for line in err.splitlines() if line.startswith("error:")], err
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- writing


@pytest.mark.parametrize("edit, named", [
    ({"prefill_time": NAN}, "'prefill_time' must be a finite number >= 0, got NaN"),
    ({"prefill_time": -5000.0}, "'prefill_time' must be a finite number >= 0, got -5000.0"),
    ({"wall_time": INF}, "'wall_time' must be a finite number >= 0, got Infinity"),
    ({"steps": -1}, "'steps' must be an integer >= 0, got -1"),
    ({"accept_lengths": [2, -3]}, "'accept_lengths' must be a list of integers >= 0, got [2, -3]"),
    ({"step_draft_ms": [0.5, NAN]}, "'step_draft_ms' must be a list of finite numbers >= 0, got [0.5, NaN]"),
    ({"new_tokens": 10 ** 30}, "'new_tokens' must be an integer >= 0, got 1000000000000000000000000000000"),
    ({"method_stats": {"drafts": [1, INF]}}, "'method_stats' must hold finite numbers only, got Infinity at drafts.1"),
    ({"verify_time": "fast"}, "'verify_time' must be a finite number >= 0, got \"fast\""),
    ({"reference": {"x": [NAN]}}, "'reference' must hold finite numbers only, got NaN at x.0"),
], ids=["prefill-nan", "prefill-negative", "wall-inf", "steps-negative", "accept-negative", "step-ms-nan",
        "tokens-huge", "stats-inf", "verify-text", "reference-nan"])
def test_a_row_the_readers_would_refuse_is_stored_as_an_error_row(tmp_path, edit, named):
    store = RunFolder.create(tmp_path, manifest())
    good = make_row("pld", 7, [2, 3], 0.5, category="qa")
    row = {**good, **edit}
    store.append(row)
    (stored,) = [json.loads(line, parse_constant=_no_constant) for line in store.samples_path.read_text().splitlines()]
    assert stored == row  # the caller's dict is what the file holds
    assert stored["status"] == "error" and stored["error"] == f"InvalidRow: {named}"
    # it still answers the same turn, and keeps nothing that was measured
    assert {k: stored[k] for k in ("method", "method_label", "question_id", "turn", "repeat", "category")} == \
        {k: good[k] for k in ("method", "method_label", "question_id", "turn", "repeat", "category")}
    assert stored["new_tokens"] == 0 and stored["output_ids"] == [] and stored["wall_time"] == 0.0
    assert problem(stored) is None
    run = load_run(store.path)
    assert run.warnings == [] and run.rows == [stored]


def test_a_valid_row_is_written_as_it_is(tmp_path):
    store = RunFolder.create(tmp_path, manifest())
    row = make_row("pld", 7, [2, 3], 0.5)
    store.append(dict(row))
    assert load_run(store.path).rows == [row]


def test_texts_utf8_cannot_hold_or_that_split_lines_read_back_unchanged(tmp_path):
    """A lone surrogate (an engine reply's `\\ud800`) made the append raise; U+2028 or U+0085 in
    an answer (written unescaped) split the line for `str.splitlines`, and the folder no longer
    loaded."""
    store = RunFolder.create(tmp_path, manifest())
    rows = [make_row("ar", 1, [1, 1], 0.5), make_row("pld", 1, [2], 0.3)]
    rows[0]["output_text"] = "bad \ud800 half"
    rows[1]["output_text"] = "one\u2028two\u0085three\u2029"
    for row in rows:
        store.append(dict(row))
    store.samples_path.read_bytes().decode("utf-8")  # the file is UTF-8
    run = load_run(store.path)
    assert run.warnings == [] and [r["output_text"] for r in run.rows] == [r["output_text"] for r in rows]


# ----------------------------------------------------------------------------- reading


DAMAGE = {  # name -> (line 4 of samples.jsonl, as bytes, from the good row there; what the warning names)
    "prefill-nan": (lambda r: _json({**r, "prefill_time": NAN}),
                    "'prefill_time' must be a finite number >= 0, got NaN"),
    "prefill-negative": (lambda r: _json({**r, "prefill_time": -5000}), "'prefill_time' must be a finite number >= 0"),
    "wall-nan": (lambda r: _json({**r, "wall_time": NAN}), "'wall_time' must be a finite number >= 0, got NaN"),
    "wall-negative": (lambda r: _json({**r, "wall_time": -1.0}), "'wall_time' must be a finite number >= 0"),
    "turn-text": (lambda r: _json({**r, "turn": "0"}), "'turn' must be an integer"),
    "accept-text": (lambda r: _json({**r, "accept_lengths": ["3"]}), "'accept_lengths' must be a list of integers"),
    "status-other": (lambda r: _json({**r, "status": "fine"}), "status must be 'ok' or 'error', got 'fine'"),
    "qid-list": (lambda r: _json({**r, "question_id": [1]}), "'question_id' must be a string or an integer"),
    "ids-float": (lambda r: _json({**r, "output_ids": [1.5]}), "'output_ids' must be a list of integers"),
    "steps-bool": (lambda r: _json({**r, "steps": True}), "'steps' must be an integer"),
    "missing-key": (lambda r: _json({k: v for k, v in r.items() if k != "wall_time"}), "missing key(s) wall_time"),
    "not-object": (lambda r: b"[1, 2]", "expected a JSON object, got list"),
    "not-json": (lambda r: _json(r)[:30], "not valid JSON"),
    "not-utf8": (lambda r: _json(r).replace(b"answer", b"answ\xe9r"), "not UTF-8 text"),
    "too-deep": (lambda r: b"[" * 5000 + b"]" * 5000, "nested deeper than 100 levels"),
    "huge-number": (lambda r: b'{"steps": 1' + b"0" * 5000 + b"}", "a number too long to read"),
}


def _json(row: dict) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode("utf-8")


def _damaged(folder: Path, kind: str) -> tuple[Path, list[dict]]:
    """A synthetic run whose 4th line (pld, mt_bench turn 1) is damaged by `kind`; the good rows."""
    rows = _rows()
    write_run(folder, rows)
    lines = (folder / "samples.jsonl").read_bytes().split(b"\n")
    lines[3] = DAMAGE[kind][0](rows[3])
    (folder / "samples.jsonl").write_bytes(b"\n".join(lines))
    return folder, rows[:3] + rows[4:]


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_line_is_named_and_skipped_and_the_rest_load(tmp_path, kind):
    folder, good = _damaged(tmp_path / "run", kind)
    run = load_run(folder)
    assert run.rows == good
    assert run.warnings == [f"{folder / 'samples.jsonl'}:4: {_said(run.warnings[0])}; row skipped (counted as not run)"]
    assert DAMAGE[kind][1] in run.warnings[0]


def _said(warning: str) -> str:
    return warning.split(":4: ", 1)[1].rsplit("; row skipped", 1)[0]


def test_many_damaged_lines_are_five_warnings_and_a_count(tmp_path):
    rows = _rows()
    folder = write_run(tmp_path / "run", rows)
    with open(folder / "samples.jsonl", "a", encoding="utf-8") as f:
        for i in range(40):
            f.write(json.dumps({**rows[0], "question_id": f"x{i}", "prefill_time": -1}) + "\n")
    run = load_run(folder)
    assert run.rows == rows and len(run.warnings) == 6
    assert "samples.jsonl:15: 'prefill_time'" in run.warnings[0]
    assert run.warnings[-1].endswith("35 more damaged line(s) skipped (40 in all; the first 5 are named above)")


@pytest.mark.parametrize("kind", ["prefill-nan", "prefill-negative", "not-json"])
def test_report_export_compare_baseline_and_check_read_around_a_damaged_line(tmp_path, capsys, kind):
    folder, _ = _damaged(tmp_path / "run", kind)
    clean = write_run(tmp_path / "clean", _rows())
    named = f"{folder / 'samples.jsonl'}:4: "

    code, out, err = cli(["report", str(folder), "--no-plots", "--format", "markdown", "-o", str(tmp_path / "r")],
                         capsys)
    assert code == 0, err
    _no_error_line(err)
    (warning,) = [w for w in _warnings(err) if "samples.jsonl" in w]  # one line, naming file:line and field
    assert named in warning and DAMAGE[kind][1] in warning
    assert "| pld |" in out and "| ar |" in out

    code, _, err = cli(["export", str(folder), "-o", str(tmp_path / "answers")], capsys)
    assert code == 0 and named in err, err
    answers = (tmp_path / "answers" / "smollm2-135m-pld.jsonl").read_text().splitlines()
    assert len(answers) == 5  # the question whose turn was damaged is left out, the other five are there

    code, _, err = cli(["compare", str(clean), str(folder)], capsys)
    assert code == 0 and named in err, err

    code, _, err = cli(["baseline", str(clean), "-o", str(tmp_path / "b.json")], capsys)
    assert code == 0, err
    # the gate compares every question of its baseline: the damaged turn's question is named, exit 2
    code, _, err = cli(["check", str(folder), "-b", str(tmp_path / "b.json")], capsys)
    assert code == 2 and named in err and "5 of the baseline's 6 questions pair" in " ".join(err.split())


def test_report_html_of_a_folder_with_a_nan_row(tmp_path, capsys):
    folder, _ = _damaged(tmp_path / "run", "prefill-nan")
    code, _, err = cli(["report", str(folder), "--html", "--no-plots", "-o", str(tmp_path / "page.html")], capsys)
    assert code == 0 and "samples.jsonl:4: 'prefill_time'" in err, err
    assert "<table" in (tmp_path / "page.html").read_text(encoding="utf-8")


def test_a_folder_whose_every_line_is_damaged_is_one_error_line(tmp_path, capsys):
    folder = write_run(tmp_path / "run", [])
    (folder / "samples.jsonl").write_bytes(b'{"method": "caf\xe9"}\n{}\n')
    code, _, err = cli(["report", str(folder), "--no-plots"], capsys)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "no readable row in" in errors[0], err
    assert len(_warnings(err)) == 2  # each damaged line named


@pytest.mark.parametrize("manifest_text", ["{not json", "[]", '{"model": "a string"}'])
def test_a_broken_manifest_still_refuses_the_folder(tmp_path, capsys, manifest_text):
    """Only rows are read around: a folder without a usable manifest is no run folder."""
    folder, _ = _damaged(tmp_path / "run", "prefill-nan")
    (folder / "manifest.json").write_text(manifest_text)
    for command in (["report", str(folder), "--no-plots"], ["export", str(folder), "-o", str(tmp_path / "a")],
                    ["run", "--resume", str(folder), "--no-report"]):
        code, _, err = cli(command, capsys)
        assert code == 2 and "manifest.json" in err and "Traceback" not in err, (command, err)


# ----------------------------------------------------------------------------- resuming


def _tamper(run: Path, index: int, **fields) -> bytes:
    """Set `fields` on row `index` of RUN/samples.jsonl as an older version or an editor would
    (NaN written as JSON's NaN); return the damaged line."""
    rows = run_rows(run)
    rows[index] = {**rows[index], **fields}
    lines = [json.dumps(r).encode() for r in rows]
    (run / "samples.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return lines[index]


@pytest.mark.parametrize("retry", [False, True], ids=["resume", "resume-retry-errors"])
def test_resume_runs_a_damaged_turn_again_and_keeps_the_line(tiny_model_dir, tmp_path, capsys, retry):
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path)
    good = run_rows(run)
    victim = next(i for i, r in enumerate(good) if r["method"] == "pld" and r["category"] == "qa")
    bad = _tamper(run, victim, prefill_time=NAN)
    code, _, err = cli(["run", "--resume", str(run), "--no-report", *(["--retry-errors"] if retry else [])], capsys)
    assert code == 0, err
    (warning,) = [w for w in _warnings(err) if "samples.jsonl" in w]
    assert f"samples.jsonl:{victim + 1}: 'prefill_time' must be a finite number >= 0, got NaN" in warning
    # the turn ran again: every turn has its good row, equal to the first run's
    after = load_run(run)
    key = lambda r: (r["method"], r["question_id"], r["turn"])  # noqa: E731
    assert sorted((key(r), r["output_ids"]) for r in after.rows) == sorted((key(r), r["output_ids"]) for r in good)
    assert all(r["status"] == "ok" and math.isfinite(r["prefill_time"]) for r in after.rows)
    # what could not be read is left where it was (named again by every reader), not deleted
    assert bad in (run / "samples.jsonl").read_bytes().split(b"\n")
    code, out, err = cli(["report", str(run), "--no-plots", "--format", "markdown"], capsys)
    assert code == 0 and "| pld |" in out, err


def test_a_nan_from_a_decoder_becomes_an_error_row_and_the_run_goes_on(tiny_model_dir, tmp_path, capsys,
                                                                        monkeypatch):
    """The write-time check through a real run: a generation whose prefill time is NaN (as an
    engine's `timings.prompt_ms` was) is stored as an error row; `--resume --retry-errors` then
    completes the run."""
    from specbench_cli.run.runner import Runner

    real = Runner._generate

    def poisoned(self, name, prompts, caps, seeds):
        gens = real(self, name, prompts, caps, seeds)
        if name == "pld":
            for gen in gens:
                gen.prefill_time = NAN
        return gens

    monkeypatch.setattr(Runner, "_generate", poisoned)
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 1, err
    run = only_run_dir(tmp_path)
    for line in (run / "samples.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=_no_constant)
    pld = [r for r in run_rows(run) if r["method"] == "pld"]
    invalid = "InvalidRow: 'prefill_time' must be a finite number >= 0, got NaN"
    assert pld and all(r["status"] == "error" for r in pld)
    assert all(r["error"] == invalid for r in pld if r["turn"] == 0)
    assert all(r["error"] == f"not run: an earlier turn failed ({invalid})" for r in pld if r["turn"] > 0)
    assert all(r["status"] == "ok" for r in run_rows(run) if r["method"] == "ar")
    monkeypatch.setattr(Runner, "_generate", real)
    code, _, err = cli(["run", "--resume", str(run), "--no-report", "--retry-errors"], capsys)
    assert code == 0, err
    assert all(r["status"] == "ok" for r in load_run(run).rows)


def test_after_a_turn_stored_as_an_error_row_the_later_turns_are_not_run(tiny_model_dir, tmp_path, capsys,
                                                                         monkeypatch):
    """A two-turn question (`refine`) whose first turn the store turns into an error row: the second
    turn is not run on an empty answer as history; it says why, as after any failed turn."""
    from specbench_cli.run.runner import Runner

    real = Runner._generate
    calls = []

    def poisoned(self, name, prompts, caps, seeds):
        gens = real(self, name, prompts, caps, seeds)
        if name == "pld":
            calls.append(len(prompts[0]))
            for gen in gens:
                gen.prefill_time = NAN
        return gens

    monkeypatch.setattr(Runner, "_generate", poisoned)
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "pld", "--tasks", "refine", "--limit", "1",
                        "--max-new-tokens", "4", "--output-dir", str(tmp_path), "--no-report", "--bc", "4"], capsys)
    assert code == 1, err
    pld = [r for r in run_rows(only_run_dir(tmp_path)) if r["method"] == "pld"]
    first, second = [r for r in pld if r["turn"] == 0], [r for r in pld if r["turn"] == 1]
    assert first and len(second) == len(first)
    assert len(calls) <= len(first) + 1  # only first turns were decoded (and the untimed warm-up)
    assert all(r["error"].startswith("InvalidRow") for r in first)
    assert all(r["status"] == "error" and r["error"].startswith("not run: an earlier turn failed (InvalidRow")
               for r in second)
