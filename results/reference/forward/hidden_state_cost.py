"""What handing the target's last hidden states to a drafter costs per step.

    python results/reference/forward/hidden_state_cost.py --prompts 6 --max-new-tokens 64 --threads 1

Two drafters that propose nothing (so both decode exactly like AR, step for step): one leaves
`needs_hidden_states` False, the other sets it True and ignores what it gets. The loop then runs
the decoder body and the LM head as two calls and slices the accepted rows' states. Runs are
interleaved per prompt (A, B, B, A, ...) so machine load hits both alike; the table gives the
median per-step verify ms of each and their difference, and checks the tokens are identical.
"""

from __future__ import annotations

import argparse
import statistics

from specbench_cli.decoding.drafter import Drafter
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.models.load import load_model
from specbench_cli.models.prompting import encode_chat, set_threads, stop_token_ids, user_turn
from specbench_cli.tasks.mini import Mini
from specbench_cli.targets import as_target


class Plain(Drafter):
    name = "plain"


class WantsHidden(Drafter):
    name = "wants-hidden"
    needs_hidden_states = True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    set_threads(args.threads)
    lm = load_model(args.model, dtype=args.dtype)
    dec = Decoder(as_target(lm.model), stop_token_ids(lm.tokenizer, lm.model))
    prompts = [encode_chat(lm.tokenizer, user_turn(q.turns[0])) for q in Mini.load()][: args.prompts]
    dec.generate(Plain(), prompts[0], 8, 1)  # warm-up, untimed
    per = {"plain": [], "wants-hidden": []}
    same = 0
    for i, ids in enumerate(prompts):
        order = [Plain(), WantsHidden()] if i % 2 == 0 else [WantsHidden(), Plain()]
        outs = {}
        for d in order:
            g = dec.generate(d, ids, args.max_new_tokens, 1)
            per[d.name] += g.step_verify_ms
            outs[d.name] = g.output_ids
        same += outs["plain"] == outs["wants-hidden"]
    a, b = statistics.median(per["plain"]), statistics.median(per["wants-hidden"])
    print(f"| drafter | steps | median verify ms/step |\n| --- | ---: | ---: |")
    print(f"| needs_hidden_states=False | {len(per['plain'])} | {a:.2f} |")
    print(f"| needs_hidden_states=True | {len(per['wants-hidden'])} | {b:.2f} |")
    print(f"difference {b - a:+.2f} ms/step ({100 * (b - a) / a:+.1f} %); identical tokens on {same}/{len(prompts)} prompts; "
          f"{args.dtype}, {args.threads} thread(s)")


if __name__ == "__main__":
    main()
