"""A `check` that can fail, one writer per run folder, duplicate rows
never counted twice, `--resume` that honours (or refuses) its flags, `--retry-errors`.

Runs use the tiny in-test model (tests/helpers/tiny.py): a few seconds each.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args
from helpers.locks import hold_lock
from helpers.rows import synthetic_rows, write_run


@pytest.fixture
def tiny_run(tiny_model_dir, tmp_path, capsys):
    """A finished ar+pld run on the tiny model (mt_bench with 2 turns + qa: 6 rows)."""
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 0, err
    return only_run_dir(tmp_path)


def _lock_by(run, pid: int) -> None:
    (run / "run.lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started": 0}))


# ----------------------------------------------------------------------------- the lock


def test_a_finished_run_leaves_no_lock(tiny_run):
    assert not (tiny_run / "run.lock").exists()


def test_second_writer_exits_2_naming_the_holder_before_loading(tiny_run, capsys, monkeypatch):
    import specbench_cli.models.load

    holder = hold_lock(tiny_run, "run.lock")  # a process that really holds the folder's lock
    try:
        monkeypatch.setattr(specbench_cli.models.load, "load_model", lambda *a, **k: pytest.fail("model loaded"))
        before = (tiny_run / "samples.jsonl").read_bytes()
        code, _, err = cli(["run", "--resume", str(tiny_run), "--no-report"], capsys)
        assert code == 2
        assert f"is in use by another specbench run (pid {holder.pid})" in " ".join(err.split())
        assert (tiny_run / "samples.jsonl").read_bytes() == before
        assert json.loads((tiny_run / "run.lock").read_text())["pid"] == holder.pid  # still the holder's
    finally:
        holder.kill()
        holder.wait()


def test_a_dead_holders_lock_is_taken_over_with_a_note(tiny_run, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock_by(tiny_run, dead.pid)
    lines = (tiny_run / "samples.jsonl").read_text().splitlines(keepends=True)
    (tiny_run / "samples.jsonl").write_text("".join(lines[:4]))  # as if killed -9 after 4 rows
    code, _, err = cli(["run", "--resume", str(tiny_run), "--no-report"], capsys)
    assert code == 0, err
    assert "taking over a stale lock" in err and str(dead.pid) in err
    assert len(run_rows(tiny_run)) == 6 and not (tiny_run / "run.lock").exists()


def test_the_lock_is_released_when_the_run_fails(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from specbench_cli.run.runner import Runner

    def interrupt(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(Runner, "run_unit", interrupt)
    assert cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)[0] == 130
    assert not (only_run_dir(tmp_path) / "run.lock").exists()


# ----------------------------------------------------------------------------- --resume flags


def test_resume_accepts_flags_that_repeat_the_manifest(tiny_run, capsys):
    lines = (tiny_run / "samples.jsonl").read_text().splitlines(keepends=True)
    (tiny_run / "samples.jsonl").write_text("".join(lines[:5]))
    code, _, err = cli(["run", "--resume", str(tiny_run), "--no-report", "--methods", "pld", "--bc", "10",
                        "--max-new-tokens", "8", "--threads", "1"], capsys)
    assert code == 0, err
    assert len(run_rows(tiny_run)) == 6


# ----------------------------------------------------------------------------- --retry-errors


def _break(row: dict) -> dict:
    return {**row, "status": "error", "error": "RuntimeError: out of memory", "new_tokens": 0, "output_ids": [],
            "output_text": "", "accept_lengths": [], "steps": 0, "ar_match": None}


def test_retry_errors_runs_error_rows_again(tiny_run, capsys):
    good = run_rows(tiny_run)
    key = lambda r: (r["method"], r["question_id"], r["turn"])  # noqa: E731
    # AR failed on the qa question; pld on the same turn therefore has no ar_match
    broken = [_break(r) if (r["method"] == "ar" and r["category"] == "qa") else
              ({**r, "ar_match": None} if r["category"] == "qa" else r) for r in good]
    (tiny_run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))

    code, _, err = cli(["run", "--resume", str(tiny_run), "--no-report"], capsys)
    assert code == 1 and "1 sample(s) failed" in err  # without the flag nothing is re-run
    assert len(run_rows(tiny_run)) == 6

    code, _, err = cli(["run", "--resume", str(tiny_run), "--no-report", "--retry-errors"], capsys)
    assert code == 0, err
    assert "2 row(s) will run again" in err  # the AR error row and the pld row it left uncompared
    now = run_rows(tiny_run)
    assert len(now) == 6 and all(r["status"] == "ok" for r in now)
    assert sorted((key(r), r["output_ids"]) for r in now) == sorted((key(r), r["output_ids"]) for r in good)
    assert all(r["ar_match"] is True for r in now if r["method"] == "pld")


# ----------------------------------------------------------------------------- duplicates


def _duplicated(tmp_path):
    """A synthetic run (1 question per category, ar + pld) whose rows appear twice, as two
    unlocked writers left them; and the same run without the copies."""
    rows = synthetic_rows(seed=3, methods=("pld",), questions_per_category=1)
    clean = write_run(tmp_path / "clean", rows)
    dup = write_run(tmp_path / "dup", rows + [dict(r, wall_time=r["wall_time"] * 9) for r in rows[:5]])
    return clean, dup


def test_readers_drop_duplicate_rows_with_a_warning(tmp_path, capsys):
    clean, dup = _duplicated(tmp_path)
    code, want, _ = cli(["report", str(clean), "--format", "csv", "--no-plots", "-o", str(tmp_path / "r1")], capsys)
    assert code == 0
    code, got, err = cli(["report", str(dup), "--format", "csv", "--no-plots", "-o", str(tmp_path / "r2")], capsys)
    assert code == 0 and got == want  # the slowed copies did not count
    assert "ignored 5 duplicate row(s)" in " ".join(err.split())
    base = tmp_path / "base.json"
    assert cli(["baseline", str(clean), "-o", str(base)], capsys)[0] == 0
    code, out, err = cli(["check", str(dup), "--baseline", str(base), "--mat-tol", "0", "--speedup-tol", "0"], capsys)
    assert code == 0 and "duplicate" in err, out + err


def test_export_never_writes_a_turn_twice(tmp_path, capsys):
    _, dup = _duplicated(tmp_path)
    code, _, err = cli(["export", str(dup), "-o", str(tmp_path / "answers")], capsys)
    assert code == 0, err
    for name in ("smollm2-135m-ar.jsonl", "smollm2-135m-pld.jsonl"):
        lines = [json.loads(x) for x in (tmp_path / "answers" / name).read_text().splitlines()]
        assert len(lines) == 6 and len({x["question_id"] for x in lines}) == 6
        turns = {x["category"]: len(x["choices"][0]["turns"]) for x in lines}
        assert turns == {"mt_bench": 2, "translation": 1, "summarization": 1, "qa": 1, "math_reasoning": 1, "rag": 1}


def test_export_leaves_out_a_question_with_a_missing_turn(tmp_path, capsys):
    rows = synthetic_rows(seed=3, methods=("pld",), questions_per_category=1)
    # pld's second MT-bench turn never finished (run still going, or killed)
    rows = [r for r in rows if not (r["method"] == "pld" and r["category"] == "mt_bench" and r["turn"] == 1)]
    run = write_run(tmp_path / "run", rows)
    code, _, err = cli(["export", str(run), "-o", str(tmp_path / "answers")], capsys)
    assert code == 0 and "left out 1 question(s) with an errored or missing turn" in " ".join(err.split())
    pld = (tmp_path / "answers" / "smollm2-135m-pld.jsonl").read_text().splitlines()
    assert len(pld) == 5 and all(json.loads(x)["category"] != "mt_bench" for x in pld)


# ----------------------------------------------------------------------------- check


def test_check_passes_against_its_own_runs_baseline_and_records_settings(tmp_path, capsys):
    run = write_run(tmp_path / "run", synthetic_rows(seed=3, methods=("pld",), questions_per_category=1))
    base = tmp_path / "base.json"
    assert cli(["baseline", str(run), "-o", str(base)], capsys)[0] == 0
    doc = json.loads(base.read_text())
    assert doc["settings"]["dtype"] == "float32" and doc["settings"]["tasks"] == ["spec_bench"]
    code, out, _ = cli(["check", str(run), "--baseline", str(base)], capsys)
    assert code == 0 and "14 baseline entries within tolerance" in out


def test_check_without_recorded_settings_still_refuses_another_suite(tmp_path, capsys):
    rows = synthetic_rows(seed=3, methods=("pld",), questions_per_category=1)
    run = write_run(tmp_path / "run", rows)
    other = write_run(tmp_path / "other", [r for r in rows if r["category"] != "rag"])
    base = tmp_path / "base.json"
    assert cli(["baseline", str(other), "-o", str(base)], capsys)[0] == 0
    doc = json.loads(base.read_text())
    del doc["settings"]  # as baselines written before settings were recorded
    base.write_text(json.dumps(doc))
    code, _, err = cli(["check", str(run), "--baseline", str(base)], capsys)
    assert code == 2 and "categories: baseline" in err and "rag" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_output_dir_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    import specbench_cli.models.load

    monkeypatch.setattr(specbench_cli.models.load, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    code, _, err = cli(["run", "--output-dir", str(locked)], capsys)
    assert code == 2 and "is not writable" in err


def test_sweep_retry_removes_a_run_lock_left_on_another_node(tmp_path):
    """A Ray worker node that died leaves its run.lock; the sweep's retry (on any node) must not
    be refused for it, while a lock of this host is left to `run`'s own dead-pid check."""
    from specbench_cli.sweep.jobs import _drop_foreign_run_lock

    run = tmp_path / "job" / "run"
    run.mkdir(parents=True)
    (run / "run.lock").write_text(json.dumps({"pid": 123, "host": "node-that-died"}))
    _drop_foreign_run_lock(run, tmp_path / "job", socket.gethostname())
    assert not (run / "run.lock").exists()
    assert "node-that-died" in (tmp_path / "job" / "job.log").read_text()
    _lock_by(run, os.getpid())
    _drop_foreign_run_lock(run, tmp_path / "job", socket.gethostname())
    assert (run / "run.lock").exists()
