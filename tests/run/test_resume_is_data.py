"""A run folder is data, never a program: `specbench run --resume DIR` takes nothing from DIR's
manifest that starts a process, reaches the network or names a file to write (`--engine-bin`,
`--engine-url`, an engine method's extra server `args`); those come from the command line again,
or the resume is refused with one line naming them, before anything is planned. Each test plants
one in a manifest (a script that would write a marker file, a server that counts its visitors, a
`--log-file` aimed at a file outside) and finds no marker, no visit and the file unchanged.

Also: the folder's engine logs (`servers/`), which a resumed run appends to, are refused when they
are links or special files. No model loads in any of these tests: the refusals come first."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.cli import cli
from helpers.rows import manifest

from specbench_cli.config import RunConfig, config_from_manifest, flat_name, option_fields, resume_normalisers
from specbench_cli.errors import UsageError
from specbench_cli.options import taken_from_folder
from specbench_cli.run.resume import check_resume_flags
from specbench_cli.servers import registry as engine_methods


def planted_run(folder: Path, **config) -> Path:
    """A run folder whose manifest's config holds `config` (over a valid one: llama.cpp:ar and ar
    on the mini suite, nothing planted)."""
    folder.mkdir(parents=True)
    doc = manifest(run_id=folder.name)
    doc["config"].update({"methods": ["ar", "llama.cpp:ar"], "tasks": ["mini"], "warmup": True, "engine_bin": None,
                          "engine_url": [], "method_options": {}, **config})
    (folder / "manifest.json").write_text(json.dumps(doc))
    (folder / "samples.jsonl").write_text("")
    return folder


def marker_script(path: Path, marker: Path) -> Path:
    """An executable that would write `marker` if anything ran it (as a server, or asked it a question)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho ran >> '{marker}'\nexit 0\n")
    path.chmod(0o755)
    return path


def refused(code: int, err: str, *names: str) -> None:
    """Exit 2 with one `error:` line naming each of `names` and how to pass it."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert "takes only from the command line" in lines[0], err
    for name in names:
        assert f"pass {name}" in lines[0] or f" {name}..." in lines[0] or f" {name} ..." in lines[0], err


# ----------------------------------------------------------------------------- programs


def test_a_planted_llama_server_never_runs_on_resume(tmp_path, capsys):
    marker = tmp_path / "marker"
    script = marker_script(tmp_path / "elsewhere" / "llama-server", marker)
    run = planted_run(tmp_path / "run", engine_bin=str(script))
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    refused(code, err, "--engine-bin")
    assert str(script) in err                      # the user sees what the folder asked for
    assert not marker.exists()


@pytest.mark.parametrize("layout", ["venv", "interpreter"])
def test_a_planted_vllm_interpreter_never_runs_on_resume(tmp_path, capsys, layout):
    """vLLM's interpreter is asked whether it has vLLM while planning: the planted one would run
    then (twice), and again as the server."""
    marker = tmp_path / "marker"
    venv = tmp_path / "elsewhere" / "venv"
    python = marker_script(venv / "bin" / "python", marker)
    given = venv if layout == "venv" else python
    run = planted_run(tmp_path / "run", methods=["ar", "vllm:ar"], engine_bin=f"vllm={given}")
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    refused(code, err, "--engine-bin")
    assert not marker.exists()


# ----------------------------------------------------------------------------- the network


class Visits(BaseHTTPRequestHandler):
    count = 0

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).count += 1
        self.send_response(200)
        self.end_headers()

    do_POST = do_GET


def test_a_planted_engine_url_is_never_reached_on_resume(tmp_path, capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Visits)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        run = planted_run(tmp_path / "run", engine_url=[f"llama.cpp:ar={url}"])
        code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    finally:
        server.shutdown()
        server.server_close()
    refused(code, err, "--engine-url")
    assert Visits.count == 0


# ----------------------------------------------------------------------------- files to write


@pytest.mark.parametrize("method", ["llama.cpp:ar", "vllm:ar"])
def test_planted_server_arguments_never_reach_a_server_on_resume(tmp_path, capsys, method):
    """`-o ENGINE:ar.args=--log-file FILE` in a manifest: the real llama-server truncated FILE."""
    victim = tmp_path / "elsewhere" / "notes.txt"
    victim.parent.mkdir()
    victim.write_text("the user's own notes\n")
    run = planted_run(tmp_path / "run", methods=["ar", method],
                      method_options={method: {"args": f"--log-file {victim}"}})
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    refused(code, err, f"-o {method}.args=")
    assert victim.read_text() == "the user's own notes\n"


def test_everything_planted_at_once_is_named_in_one_line(tmp_path, capsys):
    marker = tmp_path / "marker"
    script = marker_script(tmp_path / "elsewhere" / "llama-server", marker)
    run = planted_run(tmp_path / "run", engine_bin=str(script), engine_url=["http://127.0.0.1:9"],
                      method_options={"llama.cpp:ar": {"args": "--log-file x"}})
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    refused(code, err, "--engine-bin", "--engine-url", "-o llama.cpp:ar.args=")
    assert not marker.exists()


def test_a_control_character_in_a_planted_value_is_shown_escaped(tmp_path, capsys):
    run = planted_run(tmp_path / "run", engine_bin="/x/\x1b[2Jllama-server")
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    refused(code, err, "--engine-bin")
    assert "\x1b" not in err and "\\x1b" in err


# ----------------------------------------------------------------------------- the command line


def test_the_command_line_gives_them_on_resume_and_the_folders_are_dropped(tmp_path):
    run = planted_run(tmp_path / "run", engine_bin="/planted/llama-server", engine_url=["http://planted:1"],
                      method_options={"llama.cpp:ar": {"args": "--log-file /planted", "ctx": "512"}})
    cfg = config_from_manifest(json.loads((run / "manifest.json").read_text()))
    given = {"engine_bin": "/mine/llama-server", "engine_url": ["http://127.0.0.1:8080"],
             "option": ["llama.cpp:ar.args=--verbose"]}
    check_resume_flags(given, cfg, resume_normalisers(), str(run))
    assert cfg.engines.bin == "/mine/llama-server" and cfg.engines.url == ["http://127.0.0.1:8080"]
    assert cfg.methods.options == {"llama.cpp:ar": {"ctx": "512", "args": "--verbose"}}  # the rest as recorded


def test_a_value_the_folder_never_set_may_be_given_and_nothing_is_needed_when_none_is_set(tmp_path):
    run = planted_run(tmp_path / "run", method_options={"llama.cpp:ar": {"ctx": "512"}})
    cfg = config_from_manifest(json.loads((run / "manifest.json").read_text()))
    check_resume_flags({}, cfg, resume_normalisers(), str(run))      # nothing planted: nothing asked
    assert cfg.engines.bin is None and cfg.methods.options == {"llama.cpp:ar": {"ctx": "512"}}
    check_resume_flags({"engine_bin": "/mine/llama-server"}, cfg, resume_normalisers(), str(run))
    assert cfg.engines.bin == "/mine/llama-server"


def test_the_other_method_options_still_must_repeat_the_manifest(tmp_path):
    run = planted_run(tmp_path / "run", method_options={"llama.cpp:ar": {"ctx": "512", "args": "--verbose"}})

    def resume(*options: str) -> RunConfig:
        cfg = config_from_manifest(json.loads((run / "manifest.json").read_text()))
        check_resume_flags({"option": list(options)}, cfg, resume_normalisers(), str(run))
        return cfg

    with pytest.raises(UsageError, match="contradict"):
        resume("llama.cpp:ar.ctx=1024", "llama.cpp:ar.args=--verbose")
    assert resume("llama.cpp:ar.ctx=512", "llama.cpp:ar.args=--verbose").methods.options == {
        "llama.cpp:ar": {"ctx": "512", "args": "--verbose"}}
    assert resume("llama.cpp:ar.args=--verbose").methods.options["llama.cpp:ar"]["ctx"] == "512"


def test_the_command_lines_engine_bin_is_the_one_planned(tmp_path, capsys):
    """The folder's script is never looked at: the command line's (not executable here) is the
    one planning checks, and the refusal names it."""
    marker = tmp_path / "marker"
    script = marker_script(tmp_path / "elsewhere" / "llama-server", marker)
    mine = tmp_path / "mine" / "llama-server"
    mine.parent.mkdir()
    mine.write_text("#!/bin/sh\nexit 0\n")                # not executable
    run = planted_run(tmp_path / "run", engine_bin=str(script))
    code, _, err = cli(["run", "--resume", str(run), "--no-report", "--engine-bin", str(mine)], capsys)
    assert code == 2 and str(mine) in err and "not executable" in err, err
    assert not marker.exists()


# ----------------------------------------------------------------------------- the declarations


def test_what_a_run_folder_may_not_choose_is_declared_once():
    """The classification (docs/reliability.md): every RunConfig field and method option that
    starts a process, reaches the network or names a file to write is `from_folder=False`."""
    assert {flat_name(f) for _, f in option_fields() if not taken_from_folder(f)} == {"engine_bin", "engine_url"}
    only = {(name, f.name) for name in engine_methods.names()
            for f in dataclasses.fields(engine_methods.get(name).Options) if not taken_from_folder(f)}
    assert only == {(name, "args") for name in engine_methods.names()}
    from specbench_cli import methods

    for name in methods.names():  # specbench's own methods only read (heads, datastores, trees, models)
        options = methods.get(name).Options
        assert all(taken_from_folder(f) for f in dataclasses.fields(options)), name


# ----------------------------------------------------------------------------- engine logs


def test_a_link_planted_at_an_engine_log_is_refused_on_resume(tmp_path, capsys):
    victim = tmp_path / "elsewhere" / "notes.txt"
    victim.parent.mkdir()
    victim.write_text("the user's own notes\n")
    run = planted_run(tmp_path / "run")
    (run / "engines").mkdir()
    (run / "engines" / "llama.cpp-ar.log").symlink_to(victim)
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 2 and "symbolic link" in err and "llama.cpp-ar.log" in err, err
    assert victim.read_text() == "the user's own notes\n"


def test_a_linked_engines_folder_or_a_fifo_log_is_refused_on_resume(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = planted_run(tmp_path / "run")
    (run / "engines").symlink_to(elsewhere, target_is_directory=True)
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 2 and "symbolic link" in err, err
    assert list(elsewhere.iterdir()) == []
    (run / "engines").unlink()
    (run / "engines").mkdir()
    os.mkfifo(run / "engines" / "llama.cpp-ar.log")
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 2 and "FIFO" in err, err
