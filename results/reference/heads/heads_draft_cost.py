"""Cost of one EAGLE-2 draft tree with the full LM head vs a draft vocabulary.

A randomly initialised K-layer EAGLE head on the embedded target (the tree's size does not
depend on training), a 300-token context in the head's cache, then the median of 8 trees at
BC 10 (depth 5, top_k 9) and BC 30 (depth 5, top_k 10), with all 49,152 LM-head rows and with
V' random rows (the size of a training sub-vocabulary). One thread, float32.

usage: python results/reference/heads/heads_draft_cost.py [--rows 4200]
"""

from __future__ import annotations

import argparse
import time

import torch

from specbench_cli.models.load import load_model
from specbench_cli.methods.heads.model import EagleHead, eagle_config
from specbench_cli.methods.heads.draft_trees import eagle2_tree


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load_model("smollm2-135m", device="cpu", dtype="float32").model
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    torch.manual_seed(0)
    feats, toks = torch.randn(300, hidden), torch.randint(0, vocab, (300,))
    for k in (1, 3):
        head = EagleHead(eagle_config(model.config, k)).bind(model).eval()
        for mode in ("full", "draft vocabulary"):
            head.use_vocab(None if mode == "full" else torch.randperm(vocab)[:args.rows].sort().values)
            for budget, top_k in ((9, 9), (29, 10)):
                cache = head.new_cache()
                head.step(cache, feats[:299], toks[1:300], torch.arange(299))
                times = []
                for _ in range(8):
                    t = time.perf_counter()
                    eagle2_tree(head, cache, feats[-1:], toks[-1:], budget=budget, depth=5, top_k=top_k)
                    times.append(time.perf_counter() - t)
                    cache.crop(299)
                times.sort()
                print(f"K={k} {mode:16s} BC={budget + 1}: median {1000 * times[4]:.1f} ms per tree", flush=True)


if __name__ == "__main__":
    main()
