"""Engine methods against a fake llama-server (fake_llama_server.py, a real process started the way
a real one is): the counters -> row mapping, every fault (dies mid-request, hangs, garbage, wrong
token counts, a bad id, no start) as an EngineError, and the server stopped on every exit path:
normal end, exception, Ctrl-C, SIGTERM and the parent killed outright."""

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
from helpers.signals import sigint_default

from specbench_cli.methods.core.method import MethodContext
from specbench_cli.servers import registry as engine_methods
from specbench_cli.servers.engine_method import Counters, EngineSettings, counter_deltas, steps_from_counters
from specbench_cli.servers.server import EngineError, Server, parse_metrics

FAKE = Path(__file__).with_name("fake_llama_server.py")
EOS = 2


def fake_binary(tmp_path: Path) -> Path:
    """An executable `llama-server` that runs the fake with this Python."""
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    exe.chmod(0o755)
    return exe


def method(tmp_path: Path, name: str = "llama.cpp:ngram-mod", timeout: float = 20.0, budget: int = 4):
    m = engine_methods.get(name)(MethodContext(budget=budget))
    m.binary, m.gguf = str(fake_binary(tmp_path)), "model.gguf"
    m.settings = EngineSettings(model="model.gguf", timeout=timeout, threads=1, vocab_size=1000)
    return m


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie child of this process counts as gone
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


@pytest.fixture
def fake_mode(monkeypatch):
    def set_mode(mode: str, at: int = 1) -> None:
        monkeypatch.setenv("FAKE_LLAMA_MODE", mode)
        monkeypatch.setenv("FAKE_LLAMA_AT", str(at))
    return set_mode


# ----------------------------------------------------------------------------- counters -> steps


def test_counters_become_steps_whose_totals_are_the_engines():
    c = Counters(drafts=3, draft_tokens=12, accepted=5, per_pos=[3, 1, 1])
    accept, sizes, paths = steps_from_counters(20, c)
    assert sum(accept) == 19                                   # every token after the first is a step's
    assert len(accept) == 3 + (19 - 3 - 5)                      # drafted steps + plain steps
    assert sorted(a - 1 for a, d in zip(accept, sizes) if d) == [1, 1, 3]   # from the per-position counts
    assert sum(sizes) == 12 and all(d >= a - 1 for a, d in zip(accept, sizes))
    from specbench_cli.report.metrics import vllm_counters
    assert vllm_counters([accept], [sizes], [[1 + d for d in sizes]]) == {
        "spec_decode_num_drafts": 3, "spec_decode_num_draft_tokens": 12, "spec_decode_num_accepted_tokens": 5,
        "spec_decode_num_accepted_tokens_per_pos": [3, 1, 1] + [0] * (max(sizes) - 3)}
    assert steps_from_counters(5, Counters()) == ([1] * 4, [0] * 4, [0] * 4)  # AR: one token a step
    # vLLM verified a whole 9-token draft at the last step though the cap left room for 6: its
    # counters say 9 accepted, the answer (8 tokens: the prompt's + 7) bounds the step to 1 + 6
    accept, sizes, _ = steps_from_counters(8, Counters(drafts=1, draft_tokens=9, accepted=9, per_pos=[1] * 9))
    assert accept == [7] and sum(accept) == 7 and sizes == [9]


def test_metrics_text_and_deltas():
    before = parse_metrics('# HELP x\nvllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 4\n'
                           'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 2\n')
    after = parse_metrics('vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 7\n'
                          'vllm:spec_decode_num_draft_tokens_total{engine="0"} 9\n'
                          'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 4\n'
                          'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 4\n'
                          'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 2\n')
    assert counter_deltas(before, after, "vllm") == Counters(3, 9, 4, [2, 2])


# ----------------------------------------------------------------------------- requests


def test_a_fake_server_answer_becomes_a_generation(tmp_path, fake_mode):
    fake_mode("ok")
    m = method(tmp_path)
    try:
        g = m.generate([5, 6, 7, EOS, 9], 12, {EOS}, tmp_path)
        assert g.output_ids == [9, EOS]          # cut at EOS as the decoding loop cuts
        assert g.stats["generated"] == 12 and g.stats["counters_from"] == "metrics"
        assert g.stats["spec_decode_num_drafts"] == 2 and g.stats["spec_decode_num_accepted_tokens"] == 2
        assert g.stats["timings"]["predicted_n"] == 12 and g.prefill_time == pytest.approx(0.0015)
        assert sum(g.accept_lengths) == 11 and g.steps == 2 + (11 - 2 - 2)
        assert (tmp_path / "engines" / "llama.cpp-ngram-mod.log").read_text().count("listening") == 1
        assert "--spec-type ngram-mod" in " ".join(m.server.argv) and "-t 1" in " ".join(m.server.argv)
    finally:
        m.close()


@pytest.mark.parametrize("mode, message", [
    ("die", "fatal: the fake server broke down"),   # the server's last log lines travel with the error
    ("garbage", "not JSON"),
    ("count", "12 tokens returned but 11 counted"),
    ("bigid", "outside the vocabulary"),
])
def test_faults_are_engine_errors(tmp_path, fake_mode, mode, message):
    fake_mode(mode)
    m = method(tmp_path)
    try:
        with pytest.raises(EngineError, match=message):
            m.generate([5, 6, 7], 12, {EOS}, tmp_path)
    finally:
        m.close()


def test_a_dead_server_is_restarted_for_the_next_question(tmp_path, fake_mode):
    fake_mode("die", at=1)
    m = method(tmp_path)
    try:
        with pytest.raises(EngineError) as first:
            m.generate([5, 6, 7], 8, {EOS}, tmp_path)
        assert "fatal" in str(first.value) and "\n" not in str(first.value)
        os.environ["FAKE_LLAMA_MODE"] = "ok"
        assert m.generate([5, 6, 7], 8, {EOS}, tmp_path).output_ids   # a new server serves the next question
    finally:
        m.close()


def test_a_hang_is_a_timeout(tmp_path, fake_mode):
    fake_mode("hang")
    m = method(tmp_path, timeout=2.0)
    try:
        start = time.monotonic()
        with pytest.raises(EngineError, match="no answer within 2 s"):
            m.generate([5, 6, 7], 8, {EOS}, tmp_path)
        assert time.monotonic() - start < 20
    finally:
        m.close()


def test_a_server_that_cannot_start_says_why(tmp_path, fake_mode):
    fake_mode("nostart")
    m = method(tmp_path)
    with pytest.raises(EngineError, match="exited with code 1 while starting.*failed to load model"):
        m.generate([5, 6, 7], 8, {EOS}, tmp_path)


def test_a_cause_logged_above_the_last_lines_is_named(tmp_path):
    """vLLM's engine core fails in a child process: the cause (here its memory check) is logged
    well above the last lines, which only say 'See root cause above'. The error names it."""
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent("""
        import sys
        err = sys.stderr.write
        err("ValueError: Available memory on node 0 (1.9/23.54 GiB) on kv cache allocation is less than "
            "requested memory for kv (2.0 GiB).\\n")
        for i in range(30):
            err(f"  File 'x.py', line {i}, in frame\\n")
        err("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\\n")
        sys.exit(1)
    """))
    with pytest.raises(EngineError) as info:
        Server([sys.executable, str(script)], tmp_path / "dies.log", timeout=20).start()
    text = str(info.value)
    assert "exited with code 1 while starting; cause: ValueError: Available memory on node 0" in text
    assert text.index("cause:") < text.index("last lines of")


# ----------------------------------------------------------------------------- every exit path

PARENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from specbench_cli.servers.server import Server
    server = Server([sys.argv[1]], Path(sys.argv[2]), timeout=20).start()
    print(server.proc.pid, flush=True)
    if sys.argv[3] == "raise":
        raise RuntimeError("boom")
    if sys.argv[3] == "exit":
        sys.exit(0)
    time.sleep(600)
""")


@pytest.mark.parametrize("how", ["exit", "raise", "SIGINT", "SIGTERM", "SIGKILL"])
def test_the_server_never_outlives_specbench(tmp_path, fake_mode, how):
    """The parent ends normally, by an exception, by Ctrl-C (SIGINT), SIGTERM or SIGKILL: the
    server it started is gone every time (atexit, the SIGTERM hook, PR_SET_PDEATHSIG)."""
    fake_mode("ok")
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    mode = how if how in ("exit", "raise") else "wait"
    parent = subprocess.Popen([sys.executable, str(script), str(fake_binary(tmp_path)), str(tmp_path / "log"), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    try:
        # the pid of the shell wrapper's exec'd python: the server process itself
        server_pid = int(parent.stdout.readline())
        if mode == "wait":
            time.sleep(0.3)
            parent.send_signal(getattr(signal, how))
        try:  # a loaded machine (a CI run beside other work) can take a while to unwind the parent
            parent.wait(90)
        except subprocess.TimeoutExpired:
            parent.kill()
            out, errs = parent.communicate()
            pytest.fail(f"the parent did not end within 90 s of {how}; its stderr: {errs[-2000:]}")
        assert gone(server_pid), f"the server outlived its parent ({how})"
    finally:
        if parent.poll() is None:
            parent.kill()
        try:
            os.kill(server_pid, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass


def test_server_context_manager_stops_it(tmp_path, fake_mode):
    fake_mode("ok")
    with Server([str(fake_binary(tmp_path))], tmp_path / "s.log", timeout=20) as server:
        pid = server.proc.pid
        assert server.alive()
    assert gone(pid)


# ----------------------------------------------------------------------------- vLLM by URL


class _VllmLike:
    """A tiny OpenAI-compatible server in a thread, with vLLM's /metrics names: `reply(body)` gives
    the JSON answer of /v1/completions."""

    def __init__(self, reply):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.drafts = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, text, kind="application/json"):
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    return self._send(json.dumps({"data": [{"id": "served-model"}]}))
                d = outer.drafts
                self._send(f'vllm:spec_decode_num_drafts_total{{engine="0"}} {d}\n'
                           f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {3 * d}\n'
                           f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {d}\n'
                           f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="0"}} {d}\n',
                           "text/plain")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.last = body
                outer.drafts += 2
                self._send(json.dumps(reply(body)))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()


def vllm_method(url: str, name: str = "vllm:ngram"):
    m = engine_methods.get(name)(MethodContext(budget=4))
    m.configure(EngineSettings(model="m", url=url, timeout=10, threads=1, vocab_size=1000))
    return m


@pytest.mark.parametrize("shape", ["token_ids", "logprobs"])
def test_a_vllm_server_by_url(shape):
    def reply(body):
        ids = [body["prompt"][-1]] * (body["max_tokens"] - 1) + [EOS]
        choice = ({"token_ids": ids} if shape == "token_ids" else
                  {"logprobs": {"tokens": [f"token_id:{t}" for t in ids]}})
        return {"choices": [{"text": "x", **choice}], "usage": {"completion_tokens": len(ids)}}

    server = _VllmLike(reply)
    try:
        g = vllm_method(server.url).generate([5, 6, 7], 6, {EOS})
        assert server.last["prompt"] == [5, 6, 7] and server.last["max_tokens"] == 6
        assert server.last["model"] == "served-model" and server.last["temperature"] == 0
        assert g.output_ids == [7] * 5 + [EOS]
        assert g.stats["spec_decode_num_drafts"] == 2 and g.stats["spec_decode_num_accepted_tokens"] == 2
        assert sum(g.accept_lengths) == 5 and g.steps == 2 + (5 - 2 - 2)
    finally:
        server.close()


@pytest.mark.parametrize("reply, message", [
    (lambda body: {"choices": [{"text": "only text"}]}, "no token ids"),
    (lambda body: {"choices": [{"token_ids": [1, 2]}], "usage": {"completion_tokens": 3}}, "2 token ids returned but 3"),
    (lambda body: {"error": "boom"}, "no choices"),
])
def test_vllm_replies_that_cannot_be_answers(reply, message):
    server = _VllmLike(reply)
    try:
        with pytest.raises(EngineError, match=message):
            vllm_method(server.url).generate([5, 6, 7], 6, {EOS})
    finally:
        server.close()


def fake_vllm_python(tmp_path: Path) -> Path:
    """A venv folder whose bin/python 'has vLLM': `-c` (the package check) succeeds and `-m
    vllm.entrypoints.openai.api_server ARGS` runs the fake vLLM server with ARGS."""
    python = tmp_path / "vllm-venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exit 0; fi\nshift 2\nexec {sys.executable} '
                      f'{Path(__file__).with_name("fake_vllm_server.py")} "$@"\n')
    python.chmod(0o755)
    return python.parent.parent


def test_vllm_missing_is_one_line_naming_the_install_step_and_urls_split_per_method(tmp_path, monkeypatch):
    from specbench_cli.errors import UsageError
    from specbench_cli.locate import split_engine_bin
    from specbench_cli.servers.engine_method import split_urls

    monkeypatch.delenv("SPECBENCH_VLLM_PYTHON", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))   # no `vllm` command
    with pytest.raises(UsageError, match="vLLM not found.*--engine-bin vllm=VENV/bin/python"):
        vllm_method(None)
    assert split_urls(["http://a:1/", "vllm:ar=http://b:2"]) == {"": "http://a:1", "vllm:ar": "http://b:2"}
    assert split_engine_bin("/opt/llama") == {"llama.cpp": "/opt/llama"}
    assert split_engine_bin("llama.cpp=/a,vllm=/b/bin/python") == {"llama.cpp": "/a", "vllm": "/b/bin/python"}
    with pytest.raises(UsageError, match="ENGINE=PATH"):
        split_engine_bin("sglang=/x")


def test_a_vllm_server_specbench_starts_gets_the_runs_model_dtype_and_speculative_config(tmp_path, monkeypatch):
    """vllm:ngram without --engine-url: specbench starts `PYTHON -m vllm.entrypoints.openai.api_server`
    on the run's model with the run's dtype, seed and the method's speculative config (BC - 1 draft
    tokens), on a free loopback port, answers through it and stops it on close."""
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "record.jsonl"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    m = engine_methods.get("vllm:ngram")(MethodContext(budget=5), lookup_max=4)
    m.configure(EngineSettings(model=str(folder), engine_bin=f"vllm={fake_vllm_python(tmp_path)}", timeout=30,
                               threads=1, vocab_size=1000, dtype="bfloat16", seed=7))
    try:
        g = m.generate([5, 6, 9], 6, {EOS}, run_dir=tmp_path / "run")
        assert g.output_ids == [9] * 6 and g.stats["spec_decode_num_drafts"] == 1
        assert g.stats["spec_decode_num_draft_tokens"] == 4 and g.stats["counters_from"] == "metrics"
        pid = m.server.proc.pid
        (record,) = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
        argv = record["argv"]
        assert argv[argv.index("--model") + 1] == str(folder.resolve())
        assert argv[argv.index("--dtype") + 1] == "bfloat16" and argv[argv.index("--seed") + 1] == "7"
        assert "--enforce-eager" in argv and argv[argv.index("--host") + 1] == "127.0.0.1"
        assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
            "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
        assert record["kv"] == "2"
        assert (tmp_path / "run" / "engines" / "vllm-ngram.log").is_file()
        assert m.params()["speculative_config"]["num_speculative_tokens"] == 4
    finally:
        m.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_vllm_methods_with_a_model_need_one(tmp_path):
    from specbench_cli.errors import UsageError

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    settings = EngineSettings(model=str(folder), engine_bin=f"vllm={fake_vllm_python(tmp_path)}", timeout=30)
    with pytest.raises(UsageError, match="vllm:eagle3 needs EAGLE-3 heads"):
        engine_methods.get("vllm:eagle3")(MethodContext(budget=4)).configure(settings)
    m = engine_methods.get("vllm:draft_model")(MethodContext(budget=4, draft_model=str(folder)))
    m.configure(settings)
    assert m.speculative_config() == {"method": "draft_model", "model": str(folder.resolve()),
                                      "num_speculative_tokens": 3}
    with pytest.raises(UsageError, match="vllm:dflash needs a DFlash drafter"):
        engine_methods.get("vllm:dflash")(MethodContext(budget=4)).configure(settings)
    d = engine_methods.get("vllm:dflash")(MethodContext(budget=6), draft=str(folder))
    d.configure(settings)
    assert d.speculative_config() == {"method": "dflash", "model": str(folder.resolve()), "num_speculative_tokens": 5}


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("args, line", [
    (["--methods", "ar,llama.cpp:ngram-mod", "--engine-bin", "NOWHERE"], "tools/build-llama-cpp.sh"),
    (["--methods", "llama.cpp:nope"], "unknown engine method 'llama.cpp:nope'"),
    (["--methods", "vllm:ngram", "--engine-bin", "vllm=NOWHERE"], "vLLM not found at"),
    (["--methods", "ar", "--engine-bin", "sglang=/x"], "is not ENGINE=PATH"),
    (["--methods", "llama.cpp:ar", "--engine-bin", "FAKE", "--temperature", "0.7"], "greedy only"),
    (["--methods", "llama.cpp:ar", "--engine-bin", "FAKE", "--batch-size", "2"], "one question at a time"),
    (["--methods", "llama.cpp:draft@auto", "--engine-bin", "FAKE"], "not auto"),
    (["--methods", "llama.cpp:ar", "--engine-url", "ftp://x"], "http:// or https://"),
])
def test_bad_engine_input_is_one_line_and_exit_2_before_any_model_loads(tmp_path, args, line):
    args = [str(tmp_path / "none") if a == "NOWHERE" else str(fake_binary(tmp_path)) if a == "FAKE" else
            a.replace("NOWHERE", str(tmp_path / "none")) for a in args]
    r = subprocess.run([sys.executable, "-m", "specbench_cli", "run", *args, "--output-dir", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and line in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
