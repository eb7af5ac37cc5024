"""EAGLE-3's trainer hooks (`specbench train heads --kind eagle3`): the parts of its training that
use the trainer's own pieces (its batches, losses and `TrainerHooks`). The kind's own training
code (feature layers, draft vocabulary, the new head, the training-time test unroll) is in its
package, methods/heads/eagle3/training.py; code under methods/ imports nothing of
`specbench_cli.training` (the layers in pyproject.toml), so what needs the trainer stays here.

Loss (`eagle3_loss`): step k at position t is compared with the target's distribution of token
t+2+k (= softmax over the draft vocabulary of lm_head(last hidden state at t+1+k), the target's
logits restricted to the draft vocabulary and renormalised), soft cross-entropy averaged over
the step's loss positions, summed over steps with weight 0.8^k. A position counts when t+1+k is a
loss position of the cache (it predicts a response token, so it does not run off the end) and
the target's full-vocabulary top-1 there lies in the draft vocabulary (EAGLE-3's mask).
"""

from __future__ import annotations

from typing import Any

import torch

from specbench_cli.methods.heads.eagle3.training import (
    build,
    check_cache,
    checks,
    feature_layers_for,
    shift,
    ttt_unroll,
)

STEP_WEIGHT = 0.8  # EAGLE-3's per-step weight 0.8^k


def eagle3_loss(head, batch, weight: torch.Tensor, steps: int) -> tuple[torch.Tensor, dict]:
    """(0.8^k-weighted sum of the per-step soft cross-entropies, logs: loss and top-1/top-5 per step
    as `ce_h{k}` / `top1_h{k}` / `top5_h{k}`). `batch` = make_eagle3_batch's; `weight` [N, h] = the
    target LM head's rows of the draft vocabulary (in draft order)."""
    from specbench_cli.training.heads.losses import accuracy, project, soft_ce

    tokens, last, valid, loss_mask, layers, top1 = batch
    outs = ttt_unroll(head, layers, tokens, valid, steps)
    keep = loss_mask & head.t2d[top1]  # positions j whose target (token j+1) counts
    total = torch.zeros((), device=tokens.device)
    logs: dict[str, float] = {}
    for k, out in enumerate(outs):
        sel = shift(keep, 1 + k)  # step k at t is compared with the target at t+1+k
        if not sel.any():
            break
        target = project(shift(last, 1 + k)[sel], weight)
        draft = head.logits(out[sel]).float()
        ce = soft_ce(target, draft)
        total = total + STEP_WEIGHT ** k * ce
        logs[f"ce_h{k}"] = ce.item()
        logs[f"top1_h{k}"], logs[f"top5_h{k}"] = accuracy(target, draft)
    logs["ce"] = total.item()
    return total, logs


def make_eagle3_batch(cache: Any, seqs: list[int], max_len: int | None = None):
    """make_batch's (tokens, last hidden, valid, loss) plus layers [B,T,3h] float32 and top1 [B,T]."""
    from specbench_cli.training.heads.data import make_batch

    tokens, feats, valid, loss = make_batch(cache, seqs, max_len=max_len)
    b, t = tokens.shape
    layers = torch.zeros(b, t, cache.layers.shape[1])
    top1 = torch.zeros(b, t, dtype=torch.long)
    for i, s in enumerate(seqs):
        o, n = int(cache.offsets[s]), int(valid[i].sum())
        layers[i, :n] = cache.layers[o:o + n].float()
        top1[i, :n] = cache.top1[o:o + n]
    return tokens, feats, valid, loss, layers, top1


# ----------------------------------------------------------------------------- trainer hooks

def _losses(head: Any, batch: tuple, weight: torch.Tensor, recipe: Any, step: int):
    """Soft CE per unrolled step, 0.8^k weights; no discriminator rows."""
    loss, logs = eagle3_loss(head, batch, weight, recipe.ttt_steps)
    logs["distill"] = loss.item()
    return loss, logs, []


def _hooks():
    from specbench_cli.training.heads.hooks import TrainerHooks

    return TrainerHooks(
        build=build, batch=lambda cache, seqs, recipe: make_eagle3_batch(cache, seqs, max_len=recipe.max_len),
        losses=_losses, label=lambda recipe: f"eagle3(ttt={recipe.ttt_steps})", checks=checks,
        reads_layers=True, feature_layers=lambda recipe, n_layers: feature_layers_for(n_layers, recipe.feature_layers),
        check_cache=check_cache, cache_suffix=".eagle3-features")  # an EAGLE-3 cache holds more: its own default


HOOKS = _hooks()
