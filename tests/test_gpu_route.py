"""The offline GPU route (benchmarks/gpu/) and the GPU study (results/reference/gpu/).

A checkout's source folder `specbench_cli/` has an `__init__.py` but not the `methods` and `tasks`
that only an install maps in, and Python puts the current folder first on its path: from the
repository root, `import specbench_cli` finds the source folder. These tests plant exactly that
and show that neither the installer (install.sh, used by check.sh and the study's reproduce.sh) nor
the lossless step's pytest (installed_pytest.py) can be fooled by it any more; that the installer
installs a wheelhouse offline without touching dependencies; and that the study's pieces that need
no GPU (its questions, the 7B-shaped model built in memory, the random target) do what they say.
CI runs the whole route in a brand-new environment (.ci/run)."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"
STUDY = ROOT / "results" / "reference" / "gpu"


def load_study():
    """results/reference/gpu/study.py as a module (it imports benchmarks/gpu/check.py as `check`)."""
    spec = importlib.util.spec_from_file_location("gpu_study", STUDY / "study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_python(folder: Path, body: str) -> Path:
    """An executable `python` for the scripts' PYTHON: a shell script around this interpreter."""
    exe = folder / "python"
    exe.write_text("#!/bin/sh\n" + body.replace("REAL", sys.executable) + "\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def install_sh(python: Path, wheelhouse: Path | None = None) -> subprocess.CompletedProcess:
    """benchmarks/gpu/install.sh run from the repository root, as the documented route runs it."""
    env = {k: v for k, v in os.environ.items() if k not in ("WHEELHOUSE", "PYTHONPATH")}
    env["PYTHON"] = str(python)
    if wheelhouse is not None:
        env["WHEELHOUSE"] = str(wheelhouse)
    return subprocess.run(["bash", str(GPU / "install.sh")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_source_folder_does_not_pass_for_an_install(tmp_path):
    # a Python without site-packages: specbench is not installed for it
    bare = fake_python(tmp_path, 'exec REAL -S "$@"')
    # the hazard: from the repository root, that Python imports the source folder all the same...
    fooled = subprocess.run([str(bare), "-c", "import specbench_cli"], cwd=ROOT, capture_output=True, timeout=60)
    assert fooled.returncode == 0
    # ...which lacks what only an install maps in
    assert subprocess.run([str(bare), "-c", "import specbench_cli.methods"], cwd=ROOT, capture_output=True,
                          timeout=60).returncode != 0
    res = install_sh(bare)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: specbench is not installed") and len(res.stderr.strip().splitlines()) == 1


def test_a_wheelhouse_is_installed_offline_without_dependencies(tmp_path):
    # pip is recorded instead of run; once "installed", the Python sees its site-packages again
    log, marker = tmp_path / "pip.log", tmp_path / "installed"
    python = fake_python(tmp_path, f'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$@" >> {log}; '
                                   f'touch {marker}; exit 0; fi\n'
                                   f'if [ -f {marker} ]; then exec REAL "$@"; fi\nexec REAL -S "$@"')
    house = tmp_path / "wheels"
    house.mkdir()
    (house / "specbench_cli-0.1.0-py3-none-any.whl").write_bytes(b"")
    (house / "gguf-0.19.0-py3-none-any.whl").write_bytes(b"")
    res = install_sh(python, house)
    assert res.returncode == 0, res.stderr
    pip = log.read_text(encoding="utf-8").split()
    assert pip[:3] == ["-m", "pip", "install"] and "--no-deps" in pip and "--no-index" in pip
    assert sorted(Path(a).name for a in pip if a.endswith(".whl")) == ["gguf-0.19.0-py3-none-any.whl",
                                                                      "specbench_cli-0.1.0-py3-none-any.whl"]
    import specbench_cli

    assert res.stdout.strip().splitlines()[-1] == str(Path(specbench_cli.__file__).resolve().parent)


def test_the_check_itself_refuses_the_source_folder(tmp_path):
    """check.py run directly from the repository root by a Python without specbench installed:
    one error line, exit 2, before any output folder or model is made."""
    out = tmp_path / "check"
    res = subprocess.run([sys.executable, "-S", str(GPU / "check.py"), "--device", "cpu", "--quick", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("error: specbench is not installed")
    assert len(res.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("house", ["missing", "no-specbench-wheel"])
def test_a_wheelhouse_without_this_project_is_one_error_line(tmp_path, house):
    bare = fake_python(tmp_path, 'exec REAL -S "$@"')
    folder = tmp_path / "wheels"
    if house != "missing":
        folder.mkdir()
        (folder / "gguf-0.19.0-py3-none-any.whl").write_bytes(b"")
    res = install_sh(bare, folder)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: WHEELHOUSE")


def test_the_tests_must_have_imported_the_installed_package(tmp_path):
    """installed_pytest.py stops a pytest run whose tests imported another `specbench_cli` than the
    installed one: here a planted source-like folder next to the test, which pytest's own path
    handling puts first."""
    planted = tmp_path / "specbench_cli"
    planted.mkdir()
    (planted / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "test_uses_it.py").write_text("import specbench_cli\n\ndef test_it():\n    assert specbench_cli\n",
                                              encoding="utf-8")
    import specbench_cli

    installed = Path(specbench_cli.__file__).resolve().parent

    def session(expected: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(GPU / "installed_pytest.py"), str(expected), "-q", "-p",
                               "no:cacheprovider", "test_uses_it.py"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})

    wrong = session(installed)
    assert wrong.returncode == 3, wrong.stdout
    assert f"imported specbench_cli from {planted}" in wrong.stdout and "1 passed" not in wrong.stdout
    right = session(planted)
    assert right.returncode == 0 and "1 passed" in right.stdout
    assert f"specbench_cli imported from: {planted}" in right.stdout


def test_commands_never_run_where_a_specbench_cli_could_be_imported(tmp_path, capsys):
    check = load_study().check
    (tmp_path / "specbench_cli").mkdir()
    with pytest.raises(SystemExit) as stop:
        check.use_folder(tmp_path)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: --out ") and len(err.splitlines()) == 1
    assert check.WORKDIR != tmp_path
    clean = (tmp_path / "study").resolve()
    check.use_folder(clean)
    assert check.WORKDIR == clean
    # run folders name what lies in the output folder by relative paths; this process finds them there
    (clean / "model").mkdir()
    assert check.rel(clean / "model") == "model" and check.rel(clean / "runs" / "float32") == "runs/float32"
    assert check.here("model") == str(clean / "model") and check.here("smollm2-135m") == "smollm2-135m"


def test_the_studys_questions_are_the_first_three_of_each_category(spec_bench_questions):
    from specbench_cli import tasks
    from specbench_cli.tasks.base import select

    study = load_study()
    shipped = tasks.get("spec_bench").load(str(study.QUESTIONS))
    picked = select(tasks.get("spec_bench").load(str(spec_bench_questions)), limit=3)
    assert [q.id for q in select(shipped, limit=3)] == [q.id for q in picked] == [q.id for q in shipped]
    assert {q.category: sum(p.category == q.category for p in shipped) for q in shipped} == {
        c: 3 for c in ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")}
    whole = {json.loads(line)["question_id"]: line for line in spec_bench_questions.read_text(encoding="utf-8").splitlines()}
    for line in study.QUESTIONS.read_text(encoding="utf-8").splitlines():  # Spec-Bench's own lines, unchanged
        assert whole[json.loads(line)["question_id"]] == line


def test_the_shipped_questions_load_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_QUESTIONS_URL", "http://127.0.0.1:9/unreachable")
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    from specbench_cli import tasks

    qs = tasks.get("spec_bench").load(str(load_study().QUESTIONS))
    assert len(qs) == 18 and len({q.category for q in qs}) == 6


def test_vicuna_7b_shape_has_7b_parameters():
    """The shape is right without building it (the meta device holds no weights)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**load_study().VICUNA_7B_SHAPE))
    assert 6.7e9 < sum(p.numel() for p in model.parameters()) < 6.8e9  # Vicuna-7B: 6.74 B


def test_a_shaped_model_is_built_on_the_device_in_its_dtype_and_timed(tmp_path):
    import torch

    study = load_study()
    before = torch.get_default_dtype()
    cfg = {**study.QUICK, "cost_q": 3}
    step = study.shape_cost(study.TINY_7B_STANDIN, "cpu", "float16", cfg, tmp_path, "tiny")
    assert torch.get_default_dtype() == before  # the default dtype is put back
    record = json.loads((tmp_path / "cost-tiny-float16.json").read_text(encoding="utf-8"))
    assert len(record["ms"]) == 3 and record["key"]["dtype"] == "float16" and record["params"] == step["params"]
    assert (tmp_path / "cost-tiny-float16.png").stat().st_size > 0
    assert step["curve"]["max_q"] == 3 and 1 <= step["curve"]["largest_q_within_1.25x"] <= 3


def test_curve_summary_reads_the_affordable_block():
    summary = load_study().curve_summary([10.0, 10.5, 10.9, 11.5, 12.4, 20.0])
    assert summary["t1_ms"] == 10.0 and summary["ratio"]["2"] == 1.05 and summary["ratio"]["4"] == 1.15
    assert summary["largest_q_within_1.1x"] == 3 and summary["largest_q_within_1.25x"] == 5


def test_the_random_target_tokenizes_the_questions_and_does_not_repeat_one_token(tmp_path):
    """A random model with tied embeddings echoes its last input token forever (every draft of a
    lookup method then accepted); the study's untied one walks through many tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    study = load_study()
    check = study.check
    check.use_folder(tmp_path)
    words = study.question_words(study.QUESTIONS)
    ref = check.random_smollm2(tmp_path / "model", {**check.TINY_SHAPE, "vocab_size": 4096}, words)
    assert ref == "model"
    tok = AutoTokenizer.from_pretrained(tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    text = json.loads(study.QUESTIONS.read_text(encoding="utf-8").splitlines()[0])["turns"][0]
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True,
                                  return_dict=True)["input_ids"]
    assert tok.unk_token_id not in ids  # every word of the question is in the vocabulary
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, pad_token_id=1)
    assert len(set(out[0, len(ids):].tolist())) > 3
