"""Our `sps` vs transformers' assisted generation, same prompts, models, dtype and threads.

    python benchmarks/sps_vs_transformers.py --draft results/checkpoints/drafters/subclone-L4 --gamma 5 \\
        --per-category 2 --max-new-tokens 128 --threads 2

Pair, checked for identical greedy tokens and then timed back to back per question (order
alternating), after a warm-up, in one process:
- ours:   `sps` at block complexity gamma + 1 (gamma draft tokens per step, a chain);
- theirs: `model.generate(do_sample=False, assistant_model=draft)` with the draft's generation
  config set to `num_assistant_tokens=gamma`, `num_assistant_tokens_schedule="constant"`,
  `assistant_confidence_threshold=0` (transformers reads these three from the *assistant's*
  `generation_config`, see `AssistedCandidateGenerator.__init__` in
  transformers/generation/candidate_generator.py; passing them to `generate()` does not
  reach the candidate generator in 5.x).

Also reported: ours' greedy AR vs `generate()` without assistant (the reference both must
equal), and #MAT (tokens per target forward) of our sps.

Tokens/s = generated tokens (EOS included, capped at --max-new-tokens) / wall time of the
call, prefill included, for both sides.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target

sys.path.insert(0, str(Path(__file__).parent))
from peers import hf_generate, load_target_and_prompts  # noqa: E402  (one definition of "transformers' greedy call, timed")


def configure_assistant(draft_model, gamma: int) -> None:
    gc = draft_model.generation_config
    for key in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
        if not hasattr(gc, key):
            raise SystemExit(f"this transformers has no generation-config field {key!r}; update the script")
    gc.num_assistant_tokens = gamma
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="target model reference")
    ap.add_argument("--draft", required=True, help="draft model reference (same tokenizer)")
    ap.add_argument("--gamma", type=int, default=5, help="draft tokens per step")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-category", type=int, default=2, help="Spec-Bench questions per category")
    ap.add_argument("--n-questions", type=int, default=None, help="cap on the total number of questions")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--questions", default=None, help="Spec-Bench question.jsonl (default: found locally)")
    ap.add_argument("--no-ar", action="store_true", help="skip the AR reference pair")
    args = ap.parse_args()
    lm, eos, prompts = load_target_and_prompts(args, args.n_questions)
    model, tok = lm.model, lm.tokenizer

    bc = args.gamma + 1
    ctx = MethodContext(model, tok, budget=bc, dtype=args.dtype, draft_model=args.draft)
    sps = methods.get("sps").create(ctx)
    draft = sps.draft  # the very same weights for both sides
    configure_assistant(draft, args.gamma)
    dec = Decoder(as_target(model), eos)
    ours = {"sps": lambda ids, n: dec.generate(sps, ids, n, bc)}
    theirs = {"sps": lambda ids, n: hf_generate(model, ids, n, eos, assistant_model=draft)}
    if not args.no_ar:
        ar = methods.get("ar").create(MethodContext(model, tok, budget=1))
        ours["ar"] = lambda ids, n: dec.generate(ar, ids, n, 1)
        theirs["ar"] = lambda ids, n: hf_generate(model, ids, n, eos)

    with torch.inference_mode():  # warm-up, untimed
        for name in ours:
            ours[name](prompts[0][1], 16)
            theirs[name](prompts[0][1], 16)

    totals = {(n, side): [0, 0.0] for n in ours for side in ("ours", "hf")}
    mismatches = {n: 0 for n in ours}
    steps = accepted = 0
    print(f"target {lm.name} ({lm.params / 1e6:.0f}M), draft {args.draft} ({sps.extra_params / 1e6:.0f}M), "
          f"gamma {args.gamma}; {len(prompts)} prompts, {args.max_new_tokens} new tokens max, {args.dtype}, "
          f"{args.threads} threads")
    for i, (cat, ids) in enumerate(prompts):
        outs = {}
        for name in ours:
            order = ("ours", "hf") if i % 2 == 0 else ("hf", "ours")
            got = {}
            for side in order:
                if side == "ours":
                    g = ours[name](ids, args.max_new_tokens)
                    got[side] = (g.output_ids, g.wall_time)
                    if name == "sps":
                        steps += g.steps
                        accepted += sum(g.accept_lengths)
                else:
                    with torch.inference_mode():
                        got[side] = theirs[name](ids, args.max_new_tokens)
            for side, (out, dt) in got.items():
                totals[(name, side)][0] += len(out)
                totals[(name, side)][1] += dt
            same = got["ours"][0] == got["hf"][0]
            mismatches[name] += not same
            outs[name] = got
            print(f"  q{i} {cat:<15} {name:<4} ours {len(got['ours'][0]) / got['ours'][1]:6.1f} tok/s  "
                  f"hf {len(got['hf'][0]) / got['hf'][1]:6.1f} tok/s  {'same tokens' if same else 'DIFFERENT'}")
        if "ar" in outs and outs["sps"]["ours"][0] != outs["ar"]["ours"][0]:
            print(f"  q{i}: our sps differs from our AR")

    print()
    print(f"{'pair':<6} {'ours tok/s':>10} {'hf tok/s':>9} {'ratio':>6}  identical")
    for name in ours:
        (nt_o, t_o), (nt_h, t_h) = totals[(name, "ours")], totals[(name, "hf")]
        r_o, r_h = nt_o / t_o, nt_h / t_h
        print(f"{name:<6} {r_o:10.1f} {r_h:9.1f} {r_o / r_h:6.2f}  {len(prompts) - mismatches[name]}/{len(prompts)}")
    if steps:
        print(f"our sps #MAT (tokens per target forward): {accepted / steps:.2f}")


if __name__ == "__main__":
    main()
