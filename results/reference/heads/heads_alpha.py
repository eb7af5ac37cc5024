"""KOALA-style n-alpha of trained heads on held-out self-distillation sequences (chain drafts).

For every answer position t of the held-out sequences (the ones the trainer held out, same seed
and share), the head drafts a greedy chain of N tokens from the target's features up to t
(EAGLE: `eagle2_tree(top_k=1)`, Medusa: argmax of each head). The data are the target's own
greedy answers, so the target's next tokens are the data's tokens. n-alpha = P(draft token n is
right | tokens 1..n-1 were right); mean accepted = mean length of the right prefix + 1 (bonus),
i.e. the #MAT a chain of N would reach if verification were free. Teacher-forced features are the
cached float16 ones, so this is an estimate of the engine's measurement, not a replacement.

usage: python results/reference/heads/heads_alpha.py HEADS_DIR [HEADS_DIR ...] [--chain 3] [--sequences 8]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specbench_cli.models.load import load_model
from specbench_cli.training.heads.data import load_feature_cache, split_cache
from specbench_cli.methods.heads.checkpoint import load_heads
from specbench_cli.methods.heads.draft_trees import eagle2_tree


@torch.no_grad()
def chains(head, cache, seq: int, n: int) -> list[list[int]]:
    """Per answer position: [right/wrong per draft depth], stopping at the first wrong."""
    o, e = int(cache.offsets[seq]), int(cache.offsets[seq + 1])
    toks, feats = cache.tokens[o:e], cache.features[o:e].float()
    start = int(cache.starts[seq])
    out = []
    kv = head.new_cache() if head.kind == "eagle" else None
    if kv is not None and start > 0:  # prefix pairs (feature_t, token_{t+1}) for t < start - 1
        head.step(kv, feats[:start - 1], toks[1:start], torch.arange(start - 1))
    for t in range(start, e - o - n):
        truth = toks[t + 1:t + 1 + n].tolist()
        if kv is not None:  # root = token t (accepted); pending pair (feature_{t-1}, token_t)
            draft = eagle2_tree(head, kv, feats[t - 1:t], toks[t:t + 1], budget=n, depth=n, top_k=1).tokens
        else:
            # root = token t (from feature_{t-1}); head i on feature_{t-1} predicts token t+1+i
            draft = head.head_logits(feats[t - 1])[:n].argmax(-1).tolist()
        row = []
        for d, g in zip(draft, truth):
            row.append(d == g)
            if d != g:
                break
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("heads", nargs="+")
    ap.add_argument("--chain", type=int, default=3)
    ap.add_argument("--sequences", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    target = None
    for path in args.heads:
        meta = json.loads((Path(path) / "config.json").read_text())["specbench"]
        if target is None:
            target = load_model(meta["target"]).model
        head = load_heads(path, target)
        cache = load_feature_cache(meta["features"])
        _, held = split_cache(cache, meta["recipe"]["holdout"], meta["recipe"]["seed"])
        rows = [r for s in held[:args.sequences] for r in chains(head, cache, s, args.chain)]
        alpha = []
        for d in range(args.chain):
            reached = [r for r in rows if len(r) > d]
            alpha.append(sum(r[d] for r in reached) / max(1, len(reached)))
        mat = 1 + sum(sum(r) for r in rows) / len(rows)
        res = {"heads": path, "label": meta["label"], "positions": len(rows), "chain": args.chain,
               **{f"alpha_{d + 1}": round(a, 4) for d, a in enumerate(alpha)}, "chain_mat": round(mat, 3)}
        print(json.dumps(res))


if __name__ == "__main__":
    main()
