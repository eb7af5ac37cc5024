"""A tiny EAGLE-3 head for the tiny test model: the published architecture (methods/heads/eagle3.py)
trained a few seconds, teacher-forced, on the model's own greedy continuations, so eagle3 gets
drafts accepted in tests. It reads the inputs of layers (0, 1, 1): the tiny target has 2 layers,
fewer than EAGLE-3's rule (2, L//2, L-3) needs."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.tiny_heads import SEED_PROMPTS, _greedy

LAYERS = [0, 1, 1]


def eagle3_config(target, draft_vocab: int | None = None):
    from specbench_cli.methods.heads.model import eagle_config

    cfg = eagle_config(target.config, 1)
    cfg.draft_vocab_size = draft_vocab or target.config.vocab_size
    cfg.feature_layers = list(LAYERS)
    del cfg.bias
    return cfg


def features(target, ids: list[int]) -> torch.Tensor:
    """[T, 3h]: the inputs of LAYERS at every position of `ids`."""
    with torch.no_grad():
        hs = target.get_decoder()(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in LAYERS], dim=-1)


def train_tiny_eagle3(target, out: Path, steps: int = 150, seed: int = 0) -> str:
    from specbench_cli.methods.heads.checkpoint import save_heads
    from specbench_cli.methods.heads.eagle3 import Eagle3Head

    torch.manual_seed(seed)
    head = Eagle3Head(eagle3_config(target)).bind(target)
    head.t2d.fill_(True)
    seqs = [p + _greedy(target, p, 40) for p in SEED_PROMPTS]
    data = [(features(target, s)[:-2], torch.tensor(s[1:-1]), torch.tensor(s[2:])) for s in seqs if len(s) > 4]
    opt = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=1e-2)
    for step in range(steps):
        feats, toks, labels = data[step % len(data)]
        t = toks.shape[0]
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
        logits = head.logits(head(feats[None], toks[None], mask))[0]
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    save_heads(head.eval(), Path(out), {"target": "tiny", "label": "eagle3(tiny)"})
    return str(out)
