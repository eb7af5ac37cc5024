"""Our engine vs transformers' own loops, on the same prompts, model, dtype and threads.

    python benchmarks/peers.py --per-category 2 --max-new-tokens 128 --threads 2

Pairs (each checked for identical tokens, then timed back to back per question, after a
warm-up, in one process):
- our `ar`  vs `model.generate(do_sample=False)`
- our `pld` (BC 11 = 10 draft tokens) vs `model.generate(do_sample=False, prompt_lookup_num_tokens=10)`

Tokens/s = generated tokens (EOS included, capped at --max-new-tokens) / wall time of the call,
prefill included, for both sides. Reported: total tokens / total time per side and the ratio.
"""

from __future__ import annotations

import argparse
import time

import torch

from specbench_cli import methods, tasks
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.models.load import load_model
from specbench_cli.models.prompting import ChatPrompter, stop_token_ids
from specbench_cli.tasks.base import select as select_questions
from specbench_cli.targets import as_target


def hf_generate(model, ids, max_new, eos, **kw):
    t = time.perf_counter()
    out = model.generate(torch.tensor([ids]), max_new_tokens=max_new, do_sample=False, temperature=None,
                         top_p=None, top_k=None, eos_token_id=list(eos), pad_token_id=list(eos)[0], **kw)
    dt = time.perf_counter() - t
    return out[0, len(ids):].tolist(), dt


def load_target_and_prompts(args, n_questions=None):
    """Set threads, load the target, and build first-turn chat prompts for the Spec-Bench subset.

    Returns (loaded model, eos ids, [(category, prompt ids)]). Shared by the peer benchmarks so
    both time exactly the same prompts the same way.
    """
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, dtype=args.dtype)
    prompter = ChatPrompter(lm.tokenizer)
    qs = select_questions(tasks.get("spec_bench").load(args.questions), limit=args.per_category)
    if n_questions:
        qs = qs[:n_questions]
    prompts = [(q.category, prompter([{"role": "user", "content": q.turns[0]}])) for q in qs]
    return lm, set(stop_token_ids(lm.tokenizer, lm.model)), prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--questions", default=None)
    args = ap.parse_args()
    lm, eos, prompts = load_target_and_prompts(args)
    model, tok = lm.model, lm.tokenizer
    dec = Decoder(as_target(model), eos)
    bc = 11
    ctx = MethodContext(model, tok, budget=bc)
    ours = {"ar": methods.get("ar").create(ctx), "pld": methods.get("pld").create(ctx)}
    theirs = {"ar": {}, "pld": {"prompt_lookup_num_tokens": 10}}

    with torch.inference_mode():  # warm-up, untimed
        for name in ours:
            dec.generate(ours[name], prompts[0][1], 16, bc)
            hf_generate(model, prompts[0][1], 16, eos, **theirs[name])

    totals = {(n, side): [0, 0.0] for n in ours for side in ("ours", "hf")}
    mismatches = {n: 0 for n in ours}
    print(f"{len(prompts)} prompts, {args.max_new_tokens} new tokens max, {args.dtype}, {args.threads} threads")
    for i, (cat, ids) in enumerate(prompts):
        for name in ours:
            order = ("ours", "hf") if i % 2 == 0 else ("hf", "ours")
            got = {}
            for side in order:
                if side == "ours":
                    g = dec.generate(ours[name], ids, args.max_new_tokens, bc)
                    got[side] = (g.output_ids, g.wall_time)
                else:
                    with torch.inference_mode():
                        got[side] = hf_generate(model, ids, args.max_new_tokens, eos, **theirs[name])
            for side, (out, dt) in got.items():
                totals[(name, side)][0] += len(out)
                totals[(name, side)][1] += dt
            if got["ours"][0] != got["hf"][0]:
                mismatches[name] += 1
            print(f"  {cat:15s} {name:4s} ours {len(got['ours'][0]) / got['ours'][1]:6.1f} tok/s   "
                  f"transformers {len(got['hf'][0]) / got['hf'][1]:6.1f} tok/s   "
                  f"{'same tokens' if got['ours'][0] == got['hf'][0] else 'DIFFERENT TOKENS'}")
    print()
    print("| pair | ours tok/s | transformers tok/s | ratio (ours / transformers) | identical outputs |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, label in (("ar", "ar vs generate(greedy)"), ("pld", "pld vs generate(prompt_lookup_num_tokens=10)")):
        o = totals[(name, "ours")][0] / totals[(name, "ours")][1]
        h = totals[(name, "hf")][0] / totals[(name, "hf")][1]
        print(f"| {label} | {o:.1f} | {h:.1f} | {o / h:.2f}x | {len(prompts) - mismatches[name]}/{len(prompts)} |")


if __name__ == "__main__":
    main()
