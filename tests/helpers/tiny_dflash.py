"""A tiny DFlash drafter for the tiny test model, trained a few seconds by the real trainer
(`train heads --kind dflash`: the block-diffusion objective) on the model's own greedy
continuations, so dflash gets drafts accepted in tests. It reads the outputs of both target
layers (0, 1), has one layer and a block of 6."""

from __future__ import annotations

from pathlib import Path

import torch

from helpers.tiny_heads import SEED_PROMPTS, _greedy

TARGET_LAYERS = (0, 1)
BLOCK = 6


def tiny_dflash_cache(target, layers=TARGET_LAYERS, n_tokens: int = 40):
    """A layer feature cache (in memory) of SEED_PROMPTS + the target's greedy continuations,
    holding the hidden states after `layers`; the continuations are the answers."""
    from specbench_cli.training.heads.data import FeatureCache

    index = [i + 1 for i in layers]
    toks, last, feats, top1, lens, starts = [], [], [], [], [], []
    for p in SEED_PROMPTS:
        seq = p + _greedy(target, p, n_tokens)
        with torch.no_grad():
            out = target.get_decoder()(input_ids=torch.tensor([seq]), output_hidden_states=True)
            h = out.last_hidden_state[0]
            top1.append(target.get_output_embeddings()(h).argmax(-1))
        toks.append(torch.tensor(seq))
        last.append(h.half())
        feats.append(torch.cat([out.hidden_states[i][0] for i in index], dim=-1).half())
        lens.append(len(seq))
        starts.append(len(p) - 1)
    offsets = torch.zeros(len(lens) + 1, dtype=torch.long)
    offsets[1:] = torch.tensor(lens).cumsum(0)
    return FeatureCache(torch.cat(toks), torch.cat(last), offsets, torch.tensor(starts),
                        {"target": "tiny", "kind": "eagle3", "feature_layers": index},
                        torch.cat(feats), torch.cat(top1))


def recipe(steps: int = 120, **options):
    from specbench_cli.training.heads.train import HeadsRecipe

    return HeadsRecipe(**{"kind": "dflash", "steps": steps, "batch_size": 4, "lr": 1e-2, "warmup": 2,
                          "save_every": steps, "holdout": 0.0, "layers": 1, "block_size": BLOCK, "anchors": 8,
                          "target_layers": TARGET_LAYERS, **options})


def train_tiny_dflash(target, out: Path, steps: int = 120, **options) -> str:
    from specbench_cli.training.heads.train import train_heads

    train_heads(target, tiny_dflash_cache(target), recipe(steps, **options), Path(out), {"target": "tiny"},
                progress=False)
    return str(out)
