"""Are the heads wired into decoding as they were trained? KOALA's n-alpha of greedy chains (BC 4)
measured through the engine (`Decoder` + the `eagle` / `medusa` methods) on 4 prompts of the
heads' own self-distillation data (seeded sample; training and held-out rows alike), with the
draft vocabulary `auto` and `full`. Compare with results/reference/heads/heads_alpha.py (teacher-forced,
held-out sequences): similar numbers mean the engine hands the heads the right features; much
lower numbers on Spec-Bench then come from the questions, not from the wiring.

usage: python results/reference/heads/heads_engine_check.py EAGLE_DIR MEDUSA_DIR [DATA.jsonl]
"""

from __future__ import annotations

import json
import random
import sys

import torch

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.report.metrics import chain_alphas
from specbench_cli.models.load import load_model
from specbench_cli.models.prompting import encode_chat, stop_token_ids, user_turn
from specbench_cli.targets import as_target


def main() -> None:
    eagle_dir, medusa_dir = sys.argv[1], sys.argv[2]
    data = sys.argv[3] if len(sys.argv) > 3 else "results/checkpoints/heads/data/selfdistill.jsonl"
    torch.set_num_threads(1)
    lm = load_model("smollm2-135m")
    rows = [json.loads(line) for line in open(data)]
    prompts = [encode_chat(lm.tokenizer, user_turn(r["instruction"])) for r in random.Random(1).sample(rows, 4)]
    ctx = MethodContext(lm.model, lm.tokenizer, budget=4, target_ref="smollm2-135m")
    dec = Decoder(as_target(lm.model), set(stop_token_ids(lm.tokenizer, lm.model)))
    for kind, path in (("eagle", eagle_dir), ("medusa", medusa_dir)):
        for vocab in ("auto", "full"):
            method = methods.get(kind).create(ctx, heads=path, chain=True, vocab=vocab)
            gens = [dec.generate(method, p, 64, 4) for p in prompts]
            alphas = chain_alphas([g.accept_lengths for g in gens], [g.draft_sizes for g in gens])
            print(json.dumps({"heads": path, "vocab": vocab, **{f"alpha_{n}": round(a, 3) for n, a in alphas.items()}}))


if __name__ == "__main__":
    main()
