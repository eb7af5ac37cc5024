"""Where engine servers write and what starts them: a server's log is never opened through a link
(a run folder from elsewhere may plant `servers/NAME.log -> FILE` or `engines -> FOLDER`) nor a
FIFO; a `--engine-bin` this user may not execute, and a `libllama.so` that is not llama.cpp's, are
one line and exit 2 before any model loads (and before a run folder is made)."""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

import pytest
from helpers.cli import cli

from specbench_cli.servers.server import EngineError, Server, open_log


def fake_server(tmp_path: Path, marker: Path) -> list[str]:
    """A server command that would write `marker` if it ran."""
    script = tmp_path / "bin" / "server"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!/bin/sh\necho ran >> '{marker}'\nexec {sys.executable} -c 'import time; time.sleep(60)'\n")
    script.chmod(0o755)
    return [str(script)]


def victim_file(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "notes.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("the user's own notes\n")
    return victim


# ----------------------------------------------------------------------------- logs


def test_a_server_never_logs_through_a_link_planted_at_its_log(tmp_path):
    victim, marker = victim_file(tmp_path), tmp_path / "marker"
    log = tmp_path / "run" / "engines" / "llama.cpp-ar.log"
    log.parent.mkdir(parents=True)
    log.symlink_to(victim)
    with pytest.raises(EngineError, match="symbolic link"):
        Server(fake_server(tmp_path, marker), log, timeout=5).start()
    assert victim.read_text() == "the user's own notes\n"
    assert not marker.exists() and log.is_symlink()        # nothing started; the link left as found


def test_a_server_never_logs_into_a_linked_engines_folder(tmp_path):
    elsewhere, marker = tmp_path / "elsewhere", tmp_path / "marker"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "engines").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(EngineError, match="symbolic link"):
        Server(fake_server(tmp_path, marker), tmp_path / "run" / "engines" / "llama.cpp-ar.log", timeout=5).start()
    assert list(elsewhere.iterdir()) == [] and not marker.exists()
    (tmp_path / "run" / "engines").unlink()
    (tmp_path / "run" / "engines").symlink_to(tmp_path / "nowhere")  # a dangling link
    with pytest.raises(EngineError, match="symbolic link"):
        open_log(tmp_path / "run" / "engines" / "llama.cpp-ar.log")
    assert not (tmp_path / "nowhere").exists()


def test_a_fifo_at_a_log_is_refused_without_blocking(tmp_path):
    log = tmp_path / "engines" / "llama.cpp-ar.log"
    log.parent.mkdir()
    os.mkfifo(log)
    with pytest.raises(EngineError, match="not a plain file"):
        open_log(log)   # a FIFO with no reader: opening it for writing would wait forever


def test_a_log_is_created_and_appended_to(tmp_path):
    log = tmp_path / "engines" / "x.log"
    for text in (b"one\n", b"two\n"):
        fd = open_log(log)
        os.write(fd, text)
        os.close(fd)
    assert log.read_bytes() == b"one\ntwo\n" and not log.is_symlink()


def test_a_link_planted_after_the_server_started_is_not_read_back(tmp_path):
    """The server's last log lines go into error rows: a link swapped in at the log's name later
    must not put another file's lines there."""
    secret = tmp_path / "elsewhere" / "secret"
    secret.parent.mkdir()
    secret.write_text("a secret line\n")
    log = tmp_path / "engines" / "x.log"
    server = Server(["true"], log)
    os.close(open_log(log))
    log.unlink()
    log.symlink_to(secret)
    assert "secret" not in server.tail()


# ----------------------------------------------------------------------------- binaries


def test_a_non_executable_engine_bin_is_one_line_before_anything_loads(tmp_path, capsys):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nexit 0\n")          # mode 644
    out = tmp_path / "runs"
    code, _, err = cli(["run", "--methods", "llama.cpp:ar", "--engine-bin", str(binary), "--limit", "1",
                        "--output-dir", str(out), "--no-report"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "not executable" in lines[0] and str(binary) in lines[0], err
    assert "loading" not in err and not out.exists()   # no model loaded, no run folder made


def test_a_non_executable_vllm_interpreter_is_one_line(tmp_path, capsys):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("not a program\n")
    code, _, err = cli(["run", "--methods", "vllm:ar", "--engine-bin", f"vllm={python}", "--limit", "1",
                        "--output-dir", str(tmp_path / "runs"), "--no-report"], capsys)
    assert code == 2 and "not executable" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("kind", ["another library", "not a library"])
def test_a_libllama_that_is_not_llamas_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch, kind):
    prefix = tmp_path / "build"
    (prefix / "lib").mkdir(parents=True)
    library = prefix / "lib" / "libllama.so"
    if kind == "another library":
        other = ctypes.util.find_library("m")
        found = next((Path(d) / other for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                                                 "/usr/lib64", "/lib", "/usr/lib") if other and (Path(d) / other).is_file()),
                     None)
        if found is None:
            pytest.skip("no libm.so to copy")
        library.write_bytes(found.read_bytes())
    else:
        library.write_text("just text\n")
    monkeypatch.setenv("SPECBENCH_LLAMA_CPP", str(prefix))
    out = tmp_path / "runs"
    code, _, err = cli(["run", "--target", "llama.cpp", "--methods", "pld", "--limit", "1", "--output-dir", str(out),
                        "--no-report"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and str(library) in lines[0], err
    assert ("not llama.cpp's library" if kind == "another library" else "cannot load") in lines[0], err
    assert "loading" not in err and not out.exists()
