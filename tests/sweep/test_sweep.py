"""`specbench sweep`: grid parsing and expansion, job ids, the lock, skip/resume, a local sweep on
the tiny model. The Ray cluster test is in test_sweep_ray.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import cli
from helpers.locks import hold_lock
from helpers.sweep import comparable_rows, sweep_subprocess, table_numbers, write_grid

from specbench_cli.errors import UsageError
from specbench_cli.store.lock import SweepLock
from specbench_cli.sweep import backends, jobs
from specbench_cli.sweep.grid import expand, job_id, load_grid
from specbench_cli.sweep.questions import selector


@pytest.mark.parametrize("text,message", [
    ('methods = ["pld"]\nbc = [10]\n', "unknown key 'bc'. Did you mean 'bcs'?"),
    ('methods = ["pld"]\nbcs = 10\n', "'bcs' must be a non-empty list of integers >= 1, \"auto\" or \"adaptive\""),
    ('methods = ["pld"]\nbcs = [0]\n', "'bcs' must be a non-empty list of integers >= 1"),
    ('methods = ["pld"]\ndtypes = ["float8"]\n', "'dtypes' must be a list drawn from float32"),
    ('methods = ["pld"]\nrepeats = true\n', "'repeats' must be an integer between 1 and 10000, got true"),
    ('methods = ["pld"]\nshard = "task"\n', "'shard' must be 'category', 'none' or a number"),
    ('methods = [["pld"], "jacobi"]\n', "'methods' must be a list of method names, or a list of such lists"),
    ('models = ["x"]\n', "'methods' is required"),
    ('methods = ["pld"]\n[options.jacobi]\nn = 3\n', "'options.jacobi' is for a method that is in no method set"),
    ('methods = ["pld"\n', "not valid TOML"),
    ('methods = ["pldd"]\n', "unknown method 'pldd'. Did you mean 'pld'?"),
    ('methods = ["pld"]\ncategories = ["qaa"]\n', "unknown category 'qaa'"),
])
def test_bad_grid_is_one_line_naming_file_and_key(tmp_path, capsys, text, message):
    grid = write_grid(tmp_path, text)
    code, out, err = cli(["sweep", str(grid), "--dry-run"], capsys)
    assert code == 2, (out, err)
    flat = " ".join(err.split())
    assert message in flat and "Traceback" not in err
    if "unknown method" not in message and "unknown category" not in message:
        assert str(grid) in flat


def test_missing_grid_file_exits_2(tmp_path, capsys):
    code, _, err = cli(["sweep", str(tmp_path / "nope.toml")], capsys)
    assert code == 2 and "grid file not found" in err


def test_expand_by_category(tmp_path):
    grid = load_grid(write_grid(tmp_path, 'models = ["a", "b"]\nmethods = [["pld"], ["jacobi", "lookahead"]]\n'
                                          'bcs = [10, 30]\ncategories = ["qa", "mt_bench"]\nlimit = 2\n'))
    job_list = expand(grid, selector(grid))
    # 2 models x 2 method sets x 2 BCs x 1 dtype x 2 category shards
    assert len(job_list) == 16 and len({j.id for j in job_list}) == 16
    first = job_list[0]
    assert first.settings["categories"] == ["qa"] or first.settings["categories"] == ["mt_bench"]
    assert "--categories" in first.args and "--limit" in first.args
    assert first.args[first.args.index("--limit") + 1] == "2"
    by_cat = {j.settings["categories"][0]: j for j in job_list if j.settings["methods"] == ["pld"]}
    # mini: qa questions have one turn, mt_bench two -> 2 and 4 question-turns, x (AR + pld)
    assert by_cat["qa"].units == 2 * 2 and by_cat["mt_bench"].units == 4 * 2
    assert by_cat["qa"].tokens == by_cat["qa"].units * 128


def test_expand_by_question_count_covers_every_question_once(tmp_path):
    grid = load_grid(write_grid(tmp_path, 'methods = ["pld"]\nshard = 4\n'))
    job_list = expand(grid, selector(grid))
    ids = [q for j in job_list for q in j.settings["question_ids"]]
    assert len(ids) == 18 and len(set(ids)) == 18  # mini has 18 questions
    assert [len(j.settings["question_ids"]) for j in job_list] == [4, 4, 4, 4, 2]
    assert all("--question-ids" in j.args and "--limit" not in j.args for j in job_list)


def test_options_and_questions_path_reach_the_run_arguments(tmp_path):
    (tmp_path / "q.jsonl").write_text('{"question_id": 1, "category": "c", "turns": ["hi"]}\n')
    grid = load_grid(write_grid(tmp_path, 'methods = ["pld"]\ntasks = ["jsonl"]\nquestions = "q.jsonl"\n'
                                          '[options.pld]\nmax_ngram = 4\n'))
    (job,) = expand(grid, selector(grid))
    assert job.args[job.args.index("--questions") + 1] == str((tmp_path / "q.jsonl").resolve())
    assert job.args[job.args.index("--option") + 1] == "pld.max_ngram=4"


def test_job_ids_are_deterministic_and_follow_settings(tmp_path):
    text = 'methods = ["pld"]\ncategories = ["qa"]\n'
    a = expand(load_grid(write_grid(tmp_path, text, "a.toml")), selector(load_grid(tmp_path / "a.toml")))
    b = expand(load_grid(write_grid(tmp_path, text, "b.toml")), selector(load_grid(tmp_path / "b.toml")))
    assert [j.id for j in a] == [j.id for j in b]
    changed = dict(a[0].settings, max_new_tokens=64)
    assert job_id(changed) != a[0].id and job_id(dict(a[0].settings)) == a[0].id


def _fake_run(job_dir: Path, name: str, finished: bool, n_rows: int) -> Path:
    run = job_dir / name
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"run_id": name, "finished": "2026-01-01" if finished else None}))
    (run / "samples.jsonl").write_text("".join(json.dumps({"status": "ok", "i": i}) + "\n" for i in range(n_rows)))
    return run


def test_job_state_new_partial_finished(tmp_path):
    job_dir = tmp_path / "jobs" / "j"
    assert jobs.job_state(job_dir) == ("new", None)
    half = _fake_run(job_dir, "r1", finished=False, n_rows=2)
    assert jobs.job_state(job_dir) == ("partial", half)
    done = _fake_run(job_dir, "r2", finished=True, n_rows=3)
    assert jobs.job_state(job_dir) == ("finished", done)


def test_finished_job_is_skipped_without_starting_a_process(tmp_path, monkeypatch):
    job_dir = tmp_path / "jobs" / "j"
    run = _fake_run(job_dir, "r", finished=True, n_rows=1)
    monkeypatch.setattr(jobs.subprocess, "Popen", lambda *a, **k: pytest.fail("started a process"))
    result = jobs.run_job({"id": "j", "settings": {}, "args": ["run"]}, str(tmp_path))
    assert result["status"] == "finished" and result["skipped"] and result["run"] == str(run)


def test_half_done_job_resumes_its_run_folder(tmp_path, monkeypatch):
    job_dir = tmp_path / "jobs" / "j"
    run = _fake_run(job_dir, "r", finished=False, n_rows=1)
    calls = []

    class Proc:
        pid = 1

        def __init__(self, cmd, **kwargs):
            calls.append(cmd)

        def wait(self):
            (run / "manifest.json").write_text(json.dumps({"finished": "now"}))
            return 0

    monkeypatch.setattr(jobs.subprocess, "Popen", Proc)
    result = jobs.run_job({"id": "j", "settings": {}, "args": ["run", "--model", "m"]}, str(tmp_path))
    assert calls[0][-4:] == ["run", "--resume", str(run), "--no-report"]
    assert result["status"] == "finished" and not result["skipped"]


def test_lock_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path):
    notes = []
    with SweepLock(tmp_path, notes.append):
        with pytest.raises(UsageError, match=f"in use by another sweep \\(pid {os.getpid()}\\)"):
            SweepLock(tmp_path).acquire()
    assert not (tmp_path / "sweep.lock").exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    (tmp_path / "sweep.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    with SweepLock(tmp_path, notes.append):
        assert json.loads((tmp_path / "sweep.lock").read_text())["pid"] == os.getpid()
    assert any("stale lock" in n and str(dead.pid) in n for n in notes)


def test_second_sweep_on_a_locked_folder_exits_2(tmp_path, capsys):
    grid = write_grid(tmp_path, 'methods = ["pld"]\ncategories = ["qa"]\nlimit = 1\n')
    (tmp_path / "out").mkdir()
    holder = hold_lock(tmp_path / "out", "sweep.lock")  # a process that really holds the sweep's lock
    try:
        code, _, err = cli(["sweep", str(grid), "-o", str(tmp_path / "out")], capsys)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and f"pid {holder.pid}" in err


def test_ray_address_without_ray_names_the_install_command(tmp_path, capsys, monkeypatch):
    grid = write_grid(tmp_path, 'methods = ["pld"]\n')
    real = backends.importlib.util.find_spec
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    code, _, err = cli(["sweep", str(grid), "--ray-address", "auto"], capsys)
    assert code == 2 and "pip install 'specbench-cli[ray]'" in " ".join(err.split())


def test_dry_run_lists_jobs_and_estimate(tmp_path, capsys):
    grid = write_grid(tmp_path, 'methods = ["pld", "jacobi"]\nbcs = [10, 20]\ncategories = ["qa"]\nlimit = 2\n')
    code, out, _ = cli(["sweep", str(grid), "--dry-run", "-o", str(tmp_path / "s"), "--jobs", "2"], capsys)
    assert code == 0
    assert out.count("mini:qa") == 2 and "2 jobs (2 to run)" in out and "estimate: assumed" in out
    assert not (tmp_path / "s").exists()  # a dry run writes nothing


def tiny_grid(tmp_path: Path, model_dir: Path) -> Path:
    return write_grid(tmp_path, f'models = ["{model_dir}"]\nmethods = ["pld"]\nbcs = [4]\n'
                                f'categories = ["qa", "mt_bench"]\nlimit = 1\nmax_new_tokens = 8\n', "tiny.toml")


def test_local_sweep_runs_skips_and_resumes(tmp_path, tiny_model_dir):
    grid = tiny_grid(tmp_path, tiny_model_dir)
    out = tmp_path / "sweep"
    first = sweep_subprocess(["sweep", str(grid), "-o", str(out), "--jobs", "2"])
    assert first.returncode == 0, first.stderr
    assert "all 2 jobs finished" in first.stderr
    assert (out / "report" / "table.md").is_file() and (out / "report" / "table.csv").is_file()
    rows_before, table_before = comparable_rows(out), table_numbers(out)
    status = json.loads((out / "sweep.json").read_text())
    assert [j["status"] for j in status["jobs"]] == ["finished"] * 2
    # make one job half-done (as if killed after its first rows), then run the sweep again
    (victim,) = (out / "jobs").glob("*mt_bench*/*/manifest.json")  # 4 rows: 2 turns x (AR, pld)
    manifest = json.loads(victim.read_text())
    victim.write_text(json.dumps({**manifest, "finished": None}))
    samples = victim.parent / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join(lines[:1]) + lines[1][:10])  # keep one row and a torn line
    second = sweep_subprocess(["sweep", str(grid), "-o", str(out)])
    assert second.returncode == 0, second.stderr
    assert second.stderr.count("skipped (already finished)") == 1
    assert "--resume" in (victim.parent.parent / "job.log").read_text()
    assert comparable_rows(out) == rows_before and table_numbers(out) == table_before
