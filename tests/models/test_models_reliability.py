"""Model loading against hostile or careless input: malformed devices, model folders that ship
code, the converted-model cache (atomic, locked, verified, rebuilt) and an unreachable hub.

Subprocess tests run the real CLI (`python -m specbench_cli`) so that stdin, the exit code and
every line on stderr are the user's; the others call the functions directly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.tiny import save_tiny  # noqa: E402

from specbench_cli.errors import UsageError
from specbench_cli.models import cache as model_cache
from specbench_cli.models import load as models

REPO = Path(__file__).resolve().parents[2]


def run_cli(args, tmp_path, stdin=subprocess.DEVNULL, timeout=120, **env):
    """`specbench ARGS` in a fresh process, stdin closed; returns (exit code, stderr lines, seconds)."""
    full_env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "SPECBENCH_CACHE": str(tmp_path / "cache"),
                "HF_ENDPOINT": "http://127.0.0.1:9", "OMP_NUM_THREADS": "1", "COLUMNS": "200", **env}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specbench_cli", *args], stdin=stdin, capture_output=True,
                          text=True, env=full_env, cwd=tmp_path, timeout=timeout)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return proc.returncode, lines, time.monotonic() - t0


# ----------------------------------------------------------------------------- devices

@pytest.mark.parametrize("device", ["cpu:abc", "cpu:", ":0", "gpu", "cpu:1", "cpu:-1", "cuda:x", "CPU", "",
                                    "cpu:0:1", "cuda:99"])
def test_malformed_device_is_usage_error(device):
    with pytest.raises(UsageError) as e:
        models.check_device(device)
    assert "\n" not in str(e.value) and "device" in str(e.value)


@pytest.mark.parametrize("device", ["cpu", "cpu:0"])
def test_valid_cpu_devices_pass(device):
    assert models.check_device(device) == device


def test_bad_device_fails_in_cli_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from helpers.cli import cli

    loaded = []
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded.append(a))
    code, _, err = cli(["run", "--device", "cpu:abc", "--output-dir", str(tmp_path)], capsys)
    assert code == 2 and loaded == [] and not list(tmp_path.iterdir())
    assert err.count("error:") == 1 and err.startswith("error:") and "'cpu:abc'" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- remote code

EVIL_CODE = '''
from pathlib import Path
MARKER.write_text("custom code ran")
from transformers import LlamaConfig, LlamaForCausalLM

class EvilConfig(LlamaConfig):
    model_type = "specbench-evil"

class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
'''


def evil_folder(tmp_path: Path, model_type: str = "specbench-evil") -> tuple[Path, Path]:
    """A tiny model folder whose config.json maps the Auto classes to evil.py, which writes a
    marker file when imported. Returns (folder, marker path)."""
    folder = save_tiny(tmp_path / "evil-model", seed=0)
    marker = tmp_path / "MARKER"
    (folder / "evil.py").write_text(f"from pathlib import Path\nMARKER = Path({str(marker)!r})\n" + EVIL_CODE)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type=model_type, architectures=["EvilModel"],
               auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder, marker


def _run_args(model: Path, out: Path, *extra) -> list[str]:
    return ["run", "--model", str(model), "--methods", "ar", "--limit", "1", "--categories", "qa",
            "--max-new-tokens", "2", "--no-warmup", "--no-report", "--threads", "1", "--output-dir", str(out),
            *extra]


def test_custom_code_refused_without_flag_stdin_closed(tmp_path):
    folder, marker = evil_folder(tmp_path)
    code, lines, _ = run_cli(_run_args(folder, tmp_path / "out"), tmp_path)
    refusal = [line for line in lines if "--trust-remote-code" in line]
    assert code == 2 and len(refusal) == 1 and refusal[0].startswith("error:"), lines
    assert not any("Traceback" in line for line in lines)
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_custom_code_refused_without_flag_on_a_terminal(tmp_path):
    """With a (pseudo) terminal on stdin transformers would ask "run custom code? [y/N]": it
    must not. A prompt would block until the timeout, so finishing at all proves there is none."""
    import pty

    folder, marker = evil_folder(tmp_path)
    leader, follower = pty.openpty()
    try:
        os.write(leader, b"y\ny\n")  # what a careless user would answer to a prompt
        code, lines, _ = run_cli(_run_args(folder, tmp_path / "out"), tmp_path, stdin=follower, timeout=90)
    finally:
        os.close(leader)
        os.close(follower)
    assert code == 2 and any("--trust-remote-code" in line for line in lines), lines
    assert not marker.exists()


def test_transformers_refusal_is_caught_when_the_precheck_misses(tmp_path, monkeypatch):
    """Hub ids cannot be pre-checked: then transformers' own refusal (trust_remote_code=False,
    never None, so it never prompts) must become the same one-line UsageError."""
    folder, marker = evil_folder(tmp_path)
    monkeypatch.setattr(models, "needs_remote_code", lambda folder: None)
    with pytest.raises(UsageError, match="--trust-remote-code"):
        models.load_model(str(folder))
    assert not marker.exists()


def test_known_model_type_with_auto_map_loads_builtin_class_without_running_code(tmp_path):
    folder, marker = evil_folder(tmp_path, model_type="llama")
    lm = models.load_model(str(folder))
    assert type(lm.model).__name__ == "LlamaForCausalLM" and not marker.exists()


def test_trust_remote_code_flag_reaches_the_loader(tmp_path):
    folder, marker = evil_folder(tmp_path)
    run_cli(_run_args(folder, tmp_path / "out", "--trust-remote-code"), tmp_path, timeout=180)
    assert marker.read_text() == "custom code ran"


def test_train_commands_refuse_custom_code(tmp_path):
    folder, marker = evil_folder(tmp_path)
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat " * 20)
    for args in (["train", "drafter", "subclone", "-m", str(folder), "-o", str(tmp_path / "d")],
                 ["train", "drafter", "scratch", "--text", str(text), "--tokenizer-from", str(folder),
                  "-o", str(tmp_path / "s"), "--steps", "1"]):
        code, lines, _ = run_cli(args, tmp_path)
        assert code == 2 and any("--trust-remote-code" in line for line in lines), (args, lines)
    assert not marker.exists()


# ----------------------------------------------------------------------------- offline hub

def test_uncached_hub_id_fails_fast_offline(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9
    t0 = time.monotonic()
    with pytest.raises(UsageError) as e:
        models.load_model("specbench-test/definitely-not-cached")
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert "\n" not in msg and "specbench-test/definitely-not-cached" in msg and "local model folder" in msg


@pytest.mark.parametrize("env", [{}, {"HF_HUB_OFFLINE": "1"}])
def test_uncached_hub_id_cli_one_line_exit_2(tmp_path, env):
    code, lines, seconds = run_cli(_run_args("specbench-test/not-cached", tmp_path / "out"), tmp_path, **env)
    errors = [line for line in lines if not line.startswith("loading ")]
    assert code == 2 and len(errors) == 1 and "specbench-test/not-cached" in errors[0], lines
    # whole process, imports included, on a shared machine: generous, but far from the minute of retries
    assert seconds < 30


def test_hub_reachable_false_when_offline_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.monotonic()
    assert models.hub_reachable() is False and time.monotonic() - t0 < 0.5


# ----------------------------------------------------------------------------- cache entries

def fake_builder(calls: list, payload: bytes = b"x" * 4096):
    def build(tmp: Path) -> None:
        calls.append(tmp)
        (tmp / "config.json").write_text("{}")
        (tmp / "model.safetensors").write_bytes(payload)
    return build


def test_entry_built_once_then_reused(tmp_path):
    calls: list = []
    entry = tmp_path / "models" / "m-1"
    for _ in range(2):
        assert model_cache.ensure_entry(entry, fake_builder(calls)) == entry
    assert len(calls) == 1 and calls[0].parent == entry.parent and calls[0] != entry  # temp folder next to it
    record = json.loads((entry / model_cache.RECORD).read_text())
    assert record["files"]["model.safetensors"]["size"] == 4096
    assert sorted(p.name for p in entry.parent.iterdir()) == [".m-1.lock", "m-1"]


@pytest.mark.parametrize("damage,reason", [
    (lambda e: (e / "model.safetensors").write_bytes(b"x" * 100), "100 bytes, recorded 4096"),
    (lambda e: (e / "model.safetensors").write_bytes(b"y" * 4096), "checksum differs"),
    (lambda e: (e / "config.json").unlink(), "config.json missing"),
    (lambda e: (e / model_cache.RECORD).write_text("{oops"), "unreadable"),
])
def test_damaged_entry_rebuilt_with_one_line(tmp_path, damage, reason):
    calls: list = []
    said: list = []
    entry = tmp_path / "m-1"
    model_cache.ensure_entry(entry, fake_builder(calls))
    damage(entry)
    model_cache.ensure_entry(entry, fake_builder(calls), say=said.append)
    assert len(calls) == 2 and len(said) == 1
    assert said[0].startswith(f"cache entry {entry} damaged (") and reason in said[0] and said[0].endswith("rebuilding")
    assert model_cache.problem(entry, deep=True) is None


def test_deep_check_catches_big_file_corruption(tmp_path, monkeypatch):
    monkeypatch.setattr(model_cache, "SMALL_FILE", 10)  # everything is "big"
    entry = tmp_path / "m"
    model_cache.ensure_entry(entry, fake_builder([]))
    (entry / "model.safetensors").write_bytes(b"z" * 4096)
    assert model_cache.problem(entry, deep=False) is None
    assert "checksum" in model_cache.problem(entry, deep=True)
    monkeypatch.setenv("SPECBENCH_VERIFY_CACHE", "1")
    assert "checksum" in model_cache.problem(entry)


def test_failed_build_leaves_nothing(tmp_path):
    def build(tmp):
        (tmp / "half").write_bytes(b"1")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        model_cache.ensure_entry(tmp_path / "m", build)
    assert [p.name for p in tmp_path.iterdir()] == [".m.lock"]


def test_stale_temp_folders_cleaned_but_not_a_live_builders(tmp_path):
    (tmp_path / ".m.tmp-dead1").mkdir()
    (tmp_path / ".m.tmp-dead1" / "model.safetensors").write_bytes(b"0" * 100)
    (tmp_path / "m.tmp").mkdir()  # the fixed-name temp folder of older versions
    (tmp_path / ".other.tmp-dead2").mkdir()
    (tmp_path / ".busy.tmp-live").mkdir()
    with model_cache.locked(tmp_path / ".busy.lock") as got:  # a builder of "busy" is running
        assert got
        model_cache.ensure_entry(tmp_path / "m", fake_builder([]))
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [".busy.tmp-live", "m"]


SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from specbench_cli.models.cache import ensure_entry
    entry, log, pause = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    go = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    print("ready", flush=True)
    while go is not None and not go.exists():  # start line: both processes race from here
        time.sleep(0.01)
    def build(tmp):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        (tmp / "model.safetensors").write_bytes(os.urandom(1 << 20))
        (tmp / "config.json").write_text("{}")
        print("building", flush=True)
        time.sleep(pause)
    ensure_entry(entry, build)
    data = (entry / "model.safetensors").read_bytes()
    print("ok", len(data), flush=True)
""")


def _builder_proc(entry: Path, log: Path, pause: float, go: Path | None = None) -> subprocess.Popen:
    args = [str(entry), str(log), str(pause)] + ([str(go)] if go else [])
    return subprocess.Popen([sys.executable, "-c", SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _start_together(procs: list[subprocess.Popen], go: Path) -> None:
    """Wait until every process is imported and waiting, then let them all go at once."""
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    go.touch()


def test_two_first_builds_at_once_build_once(tmp_path):
    entry, log, go = tmp_path / "models" / "m", tmp_path / "builds.log", tmp_path / "go"
    procs = [_builder_proc(entry, log, 1.0, go) for _ in range(2)]
    _start_together(procs, go)
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all(o[0].strip().endswith(f"ok {1 << 20}") for o in outs)
    assert len(log.read_text().split()) == 1  # the second waited for the lock and found the entry built
    assert model_cache.problem(entry, deep=True) is None
    assert sorted(p.name for p in entry.parent.iterdir()) == [".m.lock", "m"]


def test_kill_9_during_first_build_then_next_run_rebuilds_cleanly(tmp_path):
    entry, log = tmp_path / "models" / "m", tmp_path / "builds.log"
    proc = _builder_proc(entry, log, 60.0)
    assert proc.stdout.readline().strip() == "ready"
    assert proc.stdout.readline().strip() == "building"  # it is inside build(), holding the lock
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not entry.exists() and list(entry.parent.glob(".m.tmp-*"))  # an orphan, never the entry
    calls: list = []
    model_cache.ensure_entry(entry, fake_builder(calls))
    assert len(calls) == 1 and not list(entry.parent.glob(".m.tmp-*"))
    assert model_cache.problem(entry, deep=True) is None


def _safetensors_folder(folder: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    save_file({"w": torch.arange(1000, dtype=torch.float32)}, str(folder / "model.safetensors"))
    return folder


def test_unrecorded_entry_adopted_when_whole_rebuilt_when_truncated(tmp_path):
    whole = _safetensors_folder(tmp_path / "a")
    calls: list = []
    model_cache.ensure_entry(whole, fake_builder(calls))
    assert calls == [] and model_cache.problem(whole) is None  # recorded, not rebuilt
    cut = _safetensors_folder(tmp_path / "b")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[:-10])
    said: list = []
    model_cache.ensure_entry(cut, fake_builder(calls), say=said.append)
    assert len(calls) == 1 and "unrecorded" in said[0]


def test_gguf_cache_rebuilt_through_load_model(tmp_path, isolated_cache, monkeypatch, capsys):
    """load_model on a .gguf: converted once, a truncated cached model.safetensors is named and
    rebuilt, and the model loads again. The GGUF conversion itself is replaced by saving the tiny
    model; the file is a real tiny GGUF, whose header is read before conversion)."""
    from helpers.tiny_gguf import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    conversions = []
    monkeypatch.setattr(models, "_convert_gguf", lambda p, dest: (conversions.append(p), save_tiny(dest)))
    first = models.load_model(str(gguf))
    folder = Path(first.resolved)
    assert folder.parent == isolated_cache / "models" and len(conversions) == 1
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    again = models.load_model(str(gguf))
    assert len(conversions) == 2 and again.params == first.params
    err = capsys.readouterr().err
    assert f"cache entry {folder} damaged (model.safetensors is 1000 bytes" in " ".join(err.split())


# ----------------------------------------------------------------------------- real GGUF conversion

LOAD_GGUF = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import transformers, torch
    from specbench_cli.models.load import load_model
    print("ready", flush=True)
    while not Path(sys.argv[2]).exists():  # start line: both processes race from here
        time.sleep(0.01)
    lm = load_model(sys.argv[1])
    print("params", lm.params, lm.resolved, flush=True)
""")


def test_two_first_gguf_conversions_at_once(tmp_path):
    """Two processes load the same never-converted GGUF at the same moment: one converts, the
    other waits on the lock and reuses the result; both load the same weights."""
    from helpers.tiny_gguf import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    env = {**os.environ, "SPECBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", LOAD_GGUF, str(gguf), str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    _start_together(procs, go)
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len({o[0].strip() for o in outs}) == 1  # same parameter count, same cache folder
    assert sum(o[1].count("converting tiny.gguf") for o in outs) == 1
    folder = Path(outs[0][0].split()[2])
    assert model_cache.problem(folder, deep=True) is None
    assert sorted(p.name for p in folder.parent.iterdir()) == [f".{folder.name}.lock", folder.name]
