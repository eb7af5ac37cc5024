"""The command line: exit codes, one-line errors, a full run on a tiny model, interruption and resume."""

from __future__ import annotations

import json

import pytest
from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args

from specbench_cli import methods
from specbench_cli.methods.core.method import Method


@pytest.mark.parametrize("args,message", [
    (["run", "--methods", "pldd"], "unknown method 'pldd'. Did you mean 'pld'?"),
    (["run", "--block-complexity", "0"], "--block-complexity must be between 1 and 4096"),
    (["run", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["run", "--tasks", "jsonl", "--questions", "/nonexistent/q.jsonl"], "questions file not found"),
    (["run", "--option", "pld.max_ngramm=4"], "has no option 'max_ngramm'"),
    (["run", "--option", "pld.max_ngram=four"], "expects int"),
    (["run", "--option", "nonsense"], "--option expects METHOD.KEY=VALUE"),
    (["run", "--temperature", "-1"], "--temperature must be a finite number >= 0"),
    (["run", "--model", "./no/such/folder"], "model path not found"),
    (["report", "/nonexistent/run"], "/nonexistent/run"),
    (["list", "methodz"], "Did you mean 'methods'?"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    code, out, err = cli(args, capsys)
    assert code == 2, (out, err)
    assert message in " ".join(err.split())
    assert "Traceback" not in err


def test_malformed_questions_file_names_the_line(tmp_path, capsys):
    q = tmp_path / "q.jsonl"
    q.write_text('{"question_id": 1, "turns": ["hi"]}\n{oops\n')
    code, _, err = cli(["run", "--tasks", "jsonl", "--questions", str(q)], capsys)
    assert code == 2 and f"{q}:2: not valid JSON" in " ".join(err.split()).replace("\n", "")


def test_unknown_command_option_exits_2(capsys):
    code, _, _ = cli(["run", "--no-such-flag"], capsys)
    assert code == 2


def test_list_methods_and_tasks(capsys):
    code, out, _ = cli(["list", "methods"], capsys)
    assert code == 0 and "pld" in out and "ar" in out
    code, out, _ = cli(["list", "tasks"], capsys)
    assert code == 0 and "spec_bench" in out and "mini" in out


def test_full_run_on_a_tiny_model_writes_manifest_and_rows(tiny_model_dir, tmp_path, capsys):
    code, out, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["methods"] == ["ar", "pld"]
    assert manifest["config"]["threads"] == 1
    assert manifest["finished"] is not None
    assert {"torch", "transformers", "python"} <= set(manifest["versions"])
    rows = run_rows(run)
    # mt_bench question has two turns, qa one; two methods
    assert len(rows) == 2 * 3
    assert {(r["method"], r["category"], r["turn"]) for r in rows} == {
        (m, c, t) for m in ("ar", "pld") for c, t in (("mt_bench", 0), ("mt_bench", 1), ("qa", 0))}
    assert all(r["status"] == "ok" and 0 < r["new_tokens"] <= 8 for r in rows)
    assert all(r["ar_match"] is True for r in rows if r["method"] == "pld")
    assert all(1 + sum(r["accept_lengths"]) >= r["new_tokens"] for r in rows)
    # report rebuilds the table from the files alone
    code, out, err = cli(["report", str(run), "--format", "csv", "--no-plots"], capsys)
    assert code == 0 and "pld" in out


def test_resume_keeps_finished_rows_and_completes_the_rest(tiny_model_dir, tmp_path, capsys):
    assert cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)[0] == 0
    run = only_run_dir(tmp_path)
    complete = run_rows(run)
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    # as if killed while writing the 4th row
    (run / "samples.jsonl").write_text("".join(lines[:3]) + lines[3][:20])
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 0, err
    resumed = run_rows(run)
    assert resumed[:3] == complete[:3]
    key = lambda r: (r["method"], r["question_id"], r["turn"])  # noqa: E731
    assert sorted(map(key, resumed)) == sorted(map(key, complete))
    assert [r["output_ids"] for r in sorted(resumed, key=key)] == [r["output_ids"] for r in sorted(complete, key=key)]


def test_ctrl_c_keeps_finished_rows_and_says_how_to_resume(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from specbench_cli.run.runner import Runner

    real = Runner.run_unit
    calls = {"n": 0}

    def interrupt_on_third(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(Runner, "run_unit", interrupt_on_third)
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 130
    assert "--resume" in err
    run = only_run_dir(tmp_path)
    assert len(run_rows(run)) == 4  # ar and pld on the two-turn question, 2 rows each
    monkeypatch.setattr(Runner, "run_unit", real)
    assert cli(["run", "--resume", str(run), "--no-report"], capsys)[0] == 0
    assert len(run_rows(run)) == 6


class Exploding(Method):
    name = "exploding"
    summary = "fails on purpose"

    def propose(self, state):
        raise RuntimeError("drafter blew up")


def test_failing_samples_become_error_rows_and_exit_1(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(methods.REGISTRY, "exploding", "test_cli:Exploding")
    args = tiny_run_args(tiny_model_dir, tmp_path)
    args[args.index("ar,pld")] = "ar,exploding"
    code, _, err = cli(args + ["--no-warmup"], capsys)
    assert code == 1 and "sample(s) failed" in err
    rows = run_rows(only_run_dir(tmp_path))
    bad = [r for r in rows if r["method"] == "exploding"]
    assert bad and all(r["status"] == "error" and r["output_text"] == "" for r in bad)
    assert "drafter blew up" in bad[0]["error"]
    assert "earlier turn failed" in [r for r in bad if r["turn"] == 1][0]["error"]


def test_a_run_plans_each_method_instance_once(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """The instances planned before the model loads (bad options exit 2 there) are the ones the
    run binds: planning is not repeated."""
    from specbench_cli.run import plan

    planned, real = [], plan.plan_instance
    monkeypatch.setattr(plan, "plan_instance", lambda cfg, inst, budget: planned.append(inst.label) or real(cfg, inst, budget))
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path), capsys)
    assert code == 0, err
    assert sorted(planned) == ["ar", "pld"]
