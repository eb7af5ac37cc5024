"""Tiny Medusa, EAGLE and Hydra heads for the tiny test model, trained for a few seconds on the model's
own greedy continuations (Medusa's self-distillation), so head methods get drafts accepted in
tests. Shared by the lossless test and the head-method tests."""

from __future__ import annotations

from pathlib import Path

import torch

from helpers.tiny import EOS

SEED_PROMPTS = [[2, 5, 9, 14, 7], [2, 40, 41, 42], [2, 77], [2, 6, 30, 31], [2, 12, 13], [2, 50, 51, 60],
                [2, 20, 21], [2, 33, 9], [2, 90, 91, 92], [2, 100]]


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=EOS, pad_token_id=1)
    return out[0, len(prompt):].tolist()


def self_distill_rows(model, tok, n_tokens: int = 40) -> list[dict]:
    """Rows {instruction, response}: the tiny model's greedy answers to short word prompts."""
    from specbench_cli.models.prompting import encode_chat, user_turn

    rows = []
    for p in SEED_PROMPTS:
        instruction = tok.decode(p[1:])
        prompt = encode_chat(tok, user_turn(instruction))
        answer = [t for t in _greedy(model, prompt, n_tokens) if t != EOS]
        rows.append({"instruction": instruction, "response": tok.decode(answer), "finished": True})
    return rows


def train_tiny_heads(model, tok, out: Path, target: str = "tiny", steps: int = 60) -> dict[str, str]:
    """{"medusa": folder, "eagle": folder, "hydra": folder} of heads trained `steps` steps on the tiny model
    (Hydra: Hydra++'s prefix-mlp heads)."""
    from specbench_cli.training.heads.data import build_feature_cache, load_feature_cache
    from specbench_cli.training.heads.train import HeadsRecipe, train_heads

    out = Path(out)
    build_feature_cache(model, tok, self_distill_rows(model, tok), out / "features", batch_size=5,
                        meta={"target": target})
    cache = load_feature_cache(out / "features")
    folders = {}
    for kind, layers in (("medusa", 1), ("eagle", 1), ("hydra", 2)):
        recipe = HeadsRecipe(kind=kind, heads_count=3, layers=layers, steps=steps, batch_size=4, lr=1e-2, warmup=2,
                             save_every=steps, holdout=0.0, noise=0.0)
        train_heads(model, cache, recipe, out / kind, {"target": target}, progress=False)
        folders[kind] = str(out / kind)
    return folders
