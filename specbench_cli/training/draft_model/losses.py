"""White-box distillation losses between a target distribution p and a drafter distribution q.

All losses take logits of shape (..., V) (e.g. (B, T, V) or (N, V)) for the target and the
drafter plus an optional boolean mask of shape (...) selecting the positions that count (the
response tokens); they return a scalar averaged over the selected positions. Target logits
are treated as constants (no gradient flows into the target).

- ``kld``:   forward KL, KL(p || q) = sum_x p(x) (log p(x) - log q(x)).
- ``tvd``:   total variation distance, 0.5 * sum_x |p(x) - q(x)|.
- ``tvdpp``: TVD++ (Goel et al. 2024): the policy-gradient form of TVD,
             grad TVD = -sum_x q(x) r(x) grad log q(x) with reward r(x) = 1[p(x) > q(x)],
             where r is normalised by its mean and std over all selected positions and the
             whole vocabulary (variance reduction, as advantage normalisation in RL).
             The returned value is the surrogate -sum_x sg(r_hat(x)) q(x), whose gradient is
             that estimator; its *value* is not a distance (use ``tvd`` to monitor).

See docs/training.md for the derivations and the choices made.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LOSSES = ("kld", "tvd", "tvd++")


def _rows(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """(..., V) logits and (...) bool mask -> (N, V) float32 rows of the selected positions."""
    if mask is not None:
        if mask.shape != logits.shape[:-1]:
            raise ValueError(f"mask shape {tuple(mask.shape)} does not match logits {tuple(logits.shape)}")
        logits = logits[mask.bool()]
    return logits.reshape(-1, logits.shape[-1]).float()


def _pair(target_logits, draft_logits, mask):
    if target_logits.shape != draft_logits.shape:
        raise ValueError(f"target logits {tuple(target_logits.shape)} and drafter logits "
                         f"{tuple(draft_logits.shape)} differ in shape")
    t = _rows(target_logits.detach(), mask)
    d = _rows(draft_logits, mask)
    if t.shape[0] == 0:
        raise ValueError("no position selected by the mask")
    return t, d


def kld(target_logits: torch.Tensor, draft_logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Forward KL(p_target || q_draft), mean over selected positions. Shapes: (..., V), mask (...)."""
    t, d = _pair(target_logits, draft_logits, mask)
    log_p = F.log_softmax(t, dim=-1)
    log_q = F.log_softmax(d, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


def tvd(target_logits: torch.Tensor, draft_logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Total variation 0.5 * sum_x |p(x) - q(x)|, mean over selected positions. Shapes: (..., V), mask (...)."""
    t, d = _pair(target_logits, draft_logits, mask)
    return 0.5 * (F.softmax(t, dim=-1) - F.softmax(d, dim=-1)).abs().sum(-1).mean()


def tvdpp_reward(p: torch.Tensor, q: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Normalised TVD reward. p, q: (N, V) probabilities -> (N, V) reward with mean 0 and std 1.

    r(x) = 1[p(x) > q(x)]; r_hat = (r - mean(r)) / (std(r) + eps), mean and (population) std taken
    jointly over the N positions and the V vocabulary entries.
    """
    r = (p > q).float()
    return (r - r.mean()) / (r.std(unbiased=False) + eps)


def tvdpp(target_logits: torch.Tensor, draft_logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """TVD++ surrogate, mean over selected positions. Shapes: (..., V), mask (...).

    loss = -mean_n sum_x sg(r_hat[n, x]) * q[n, x], so that
    grad loss = -mean_n sum_x r_hat q grad log q: the exact (full-vocabulary) policy-gradient
    estimator of TVD with the normalised reward of ``tvdpp_reward``.
    """
    t, d = _pair(target_logits, draft_logits, mask)
    p = F.softmax(t, dim=-1)
    q = F.softmax(d, dim=-1)
    r_hat = tvdpp_reward(p, q.detach())
    return -(r_hat * q).sum(-1).mean()


def distill_loss(name: str, target_logits: torch.Tensor, draft_logits: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """Dispatch on a loss name in ``LOSSES``."""
    fns = {"kld": kld, "tvd": tvd, "tvd++": tvdpp}
    if name not in fns:
        raise ValueError(f"unknown loss {name!r}; known: {', '.join(LOSSES)}")
    return fns[name](target_logits, draft_logits, mask)
