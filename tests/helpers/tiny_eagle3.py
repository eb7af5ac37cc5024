"""A tiny EAGLE-3 head for the tiny test model, trained a few seconds by the real trainer
(`train heads --kind eagle3`: training-time test, own draft vocabulary) on the model's own greedy
continuations, so eagle3 gets drafts accepted in tests. It reads the inputs of layers (0, 1, 1):
the tiny target has 2 layers, fewer than EAGLE-3's rule (2, L//2, L-3) needs."""

from __future__ import annotations

from pathlib import Path

import torch

from helpers.tiny_heads import SEED_PROMPTS, _greedy

LAYERS = [0, 1, 1]


def features(target, ids: list[int]) -> torch.Tensor:
    """[T, 3h]: the inputs of LAYERS at every position of `ids`."""
    with torch.no_grad():
        hs = target.get_decoder()(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in LAYERS], dim=-1)


def tiny_eagle3_cache(target, n_tokens: int = 40):
    """An EAGLE-3 feature cache (in memory) of SEED_PROMPTS + the target's greedy continuations;
    the continuations are the answers (loss positions)."""
    from specbench_cli.training.heads.data import FeatureCache

    toks, last, layers, top1, lens, starts = [], [], [], [], [], []
    for p in SEED_PROMPTS:
        seq = p + _greedy(target, p, n_tokens)
        with torch.no_grad():
            out = target.get_decoder()(input_ids=torch.tensor([seq]), output_hidden_states=True)
            h = out.last_hidden_state[0]
            top1.append(target.get_output_embeddings()(h).argmax(-1))
        toks.append(torch.tensor(seq))
        last.append(h.half())
        layers.append(torch.cat([out.hidden_states[i][0] for i in LAYERS], dim=-1).half())
        lens.append(len(seq))
        starts.append(len(p) - 1)
    offsets = torch.zeros(len(lens) + 1, dtype=torch.long)
    offsets[1:] = torch.tensor(lens).cumsum(0)
    return FeatureCache(torch.cat(toks), torch.cat(last), offsets, torch.tensor(starts),
                        {"target": "tiny", "kind": "eagle3", "feature_layers": list(LAYERS)},
                        torch.cat(layers), torch.cat(top1))


def train_tiny_eagle3(target, out: Path, steps: int = 150, seed: int = 0, **recipe) -> str:
    from specbench_cli.training.heads.train import HeadsRecipe, train_heads

    options = {"kind": "eagle3", "steps": steps, "batch_size": 4, "lr": 1e-2, "warmup": 2, "save_every": steps,
               "holdout": 0.0, "seed": seed, "feature_layers": tuple(LAYERS), **recipe}
    train_heads(target, tiny_eagle3_cache(target), HeadsRecipe(**options), Path(out), {"target": "tiny"},
                progress=False)
    return str(out)
