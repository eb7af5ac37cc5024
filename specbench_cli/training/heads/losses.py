"""Losses of the draft heads (Medusa, EAGLE, Hydra) and KOALA's discriminator.

Distillation targets are the target's own next-token distributions, recomputed per batch as
`softmax(lm_head(feature))` from the cached features (the logits ARE lm_head of the feature).
For speed on CPU the softmax runs over a sub-vocabulary `vocab` (ids, [V']) of the tokens that
occur in the data or are the target's top-1 somewhere in it (see training/heads/hooks.py data_vocab); both
distributions are renormalised over it (as EAGLE-3 restricts its draft vocabulary). `vocab=None`
uses the full vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def project(states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """states [N, h] @ weight[V', h]^T -> logits [N, V'] (float32)."""
    return states.float() @ weight.float().t()


def soft_ce(target_logits: torch.Tensor, draft_logits: torch.Tensor) -> torch.Tensor:
    """Mean over rows of -sum p log q; both [N, V']."""
    return -(F.softmax(target_logits.detach(), -1) * F.log_softmax(draft_logits, -1)).sum(-1).mean()


def accuracy(target_logits: torch.Tensor, draft_logits: torch.Tensor) -> tuple[float, float]:
    """(top-1, top-5): target argmax == draft argmax, target argmax within draft top-5."""
    t = target_logits.argmax(-1)
    top5 = draft_logits.topk(min(5, draft_logits.shape[-1]), -1).indices
    return (top5[:, 0] == t).float().mean().item(), (top5 == t[:, None]).any(-1).float().mean().item()


class Discriminator(nn.Module):
    """KOALA discriminator D(hidden, logits) -> logit of P(logits came from the target).

    KOALA maps the target's last hidden state linearly to the logit dimension and feeds it with
    a logit vector to FC layers. A linear map h -> V followed by the first FC layer (V -> w) is a
    single linear map h -> w, so we store that product (`hid`, h -> w) instead of a 28M-parameter
    h -> V matrix. The logit vector enters as log-probabilities (`prob`, V' -> w): shift-invariant
    (raw logits would let D separate target and head on their arbitrary shift), clamped at -30,
    and the sum of both maps is layer-normalised. Then `layers - 1` more SiLU + Linear(w, w) and
    a Linear(w, 1).

    Why not probabilities: measured 2026-11-23 (D alone against a trained EAGLE head, 200 steps,
    lr 1e-4, v2 features): with softmax probabilities D stayed at chance (held-out accuracy 0.50,
    L_D 1.389 = 2 ln 2), so the adversarial term carried no signal and "adversarial" heads were
    the plain ones plus noise; with log-probabilities + LayerNorm it reached 0.68 (L_D 1.357).
    tests/training/test_heads.py::test_discriminator_learns_to_separate guards this.
    """

    def __init__(self, hidden: int, vocab: int, layers: int = 1, width: int = 256) -> None:
        super().__init__()
        self.hid = nn.Linear(hidden, width)
        self.prob = nn.Linear(vocab, width, bias=False)
        self.norm = nn.LayerNorm(width)
        self.body = nn.Sequential(*[m for _ in range(layers - 1) for m in (nn.SiLU(), nn.Linear(width, width))])
        self.out = nn.Sequential(nn.SiLU(), nn.Linear(width, 1))

    def forward(self, hidden: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """hidden [N, h], logits [N, V'] -> [N] real/fake logits."""
        logp = F.log_softmax(logits.float(), -1).clamp(min=-30.0)
        x = self.norm(self.hid(hidden.float()) + self.prob(logp))
        return self.out(self.body(x)).squeeze(-1)


def d_loss(disc: Discriminator, hidden: torch.Tensor, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """L_D = -E[log D(real)] - E[log(1 - D(fake))] (fake detached)."""
    r, f = disc(hidden, real.detach()), disc(hidden, fake.detach())
    return F.binary_cross_entropy_with_logits(r, torch.ones_like(r)) + \
        F.binary_cross_entropy_with_logits(f, torch.zeros_like(f))


def g_adv_loss(disc: Discriminator, hidden: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """-E[log D(fake)] (the generator's adversarial term, non-saturating form)."""
    f = disc(hidden, fake)
    return F.binary_cross_entropy_with_logits(f, torch.ones_like(f))


def medusa_terms(heads, feats: torch.Tensor, loss_mask: torch.Tensor, weight: torch.Tensor):
    """Per-head (hidden [n,h], target logits [n,V'], draft logits [n,V']) on the valid positions.

    feats [B,T,h] target features, loss_mask [B,T] (t predicts a response token). Head i at
    position t is compared with the target's distribution at t+1+i (the distribution of token
    t+2+i), where that position is itself a loss position."""
    out = []
    for i, head in enumerate(heads):
        shift = 1 + i
        sel = loss_mask[:, :-shift] & loss_mask[:, shift:] if feats.shape[1] > shift else None
        if sel is None or not sel.any():
            break
        src = feats[:, :-shift][sel]
        tgt = project(feats[:, shift:][sel], weight)
        out.append((src, tgt, project(head(src), weight)))
    return out


def eagle_terms(head, feats, tokens, valid, loss_mask, weight, noise: float, generator=None):
    """(pred features [n,h], target features [n,h], input features [n,h], target logits, draft logits).

    Pair t = (feature_t + noise, token_{t+1}) predicts feature_{t+1}; loss positions are t with
    t+1 a loss position (feature_{t+1} predicts a response token). Uniform noise U(-noise/2,
    noise/2) on the input features (EAGLE-1's feature-noise augmentation)."""
    from specbench_cli.methods.heads.model import causal_mask

    x = feats[:, :-1]
    if noise > 0:
        x = x + (torch.rand(x.shape, generator=generator, device=x.device) - 0.5) * noise
    v = valid[:, 1:]
    pred = head(x, tokens[:, 1:], causal_mask(v))  # [B, T-1, h]
    sel = loss_mask[:, 1:] & v
    target = feats[:, 1:][sel]
    pred_sel = pred[sel]
    return pred_sel, target, feats[:, :-1][sel], project(target, weight), project(pred_sel, weight)


def hydra_terms(heads, feats, tokens, valid, loss_mask, weight: torch.Tensor):
    """Per-head (input feature [n,h], target logits [n,V'], draft logits [n,V']) as `medusa_terms`:
    head i at position t (base_t and tokens t+1 .. t+1+i, teacher-forced from the data) is
    compared with the target's distribution at t+1+i (Hydra++'s teacher loss, lm_loss_weight 0)."""
    out = []
    for i, states in enumerate(heads.train_states(feats, tokens, valid)):
        shift = 1 + i
        sel = loss_mask[:, :-shift] & loss_mask[:, shift:]
        if not sel.any():
            break
        out.append((feats[:, :-shift][sel], project(feats[:, shift:][sel], weight), project(states[sel], weight)))
    return out
