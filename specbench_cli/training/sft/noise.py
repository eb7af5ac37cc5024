"""MSN noise (Make Some Noise, Eq. 3-5): replace one segment of each response in the INPUT.

For a tokenised example (finetune.Example) with prompt length P and response length R the
sequence is x_0 .. x_{P+R-1}; positions P-1 .. P+R-2 carry the loss (they predict the response).
MSN replaces the inputs x_k .. x_{k+w-1} (w = min(L, R-1)) by noise tokens x̂ while every label
stays the gold token, so positions k .. k+w-1 learn to predict x_{k+1} .. x_{k+w} from a noisy
prefix (Eq. 3). The window lies inside the response inputs P .. P+R-2: the last response token
is never an input of a loss position, so noising it would change nothing.

Noise content (`kind`):
- "ahead"  (Eq. 4): x̂_i = x_j with j uniform in [0, i), drawn independently for every i from the
  GOLD prefix (prompt and chat-template tokens included, as X_<i is the whole sequence before i);
- "random": x̂_i uniform over the vocabulary [0, V).

Noise position (`position`):
- "random": k uniform over the P .. P+R-1-w admissible starts;
- "loss"   (Eq. 5): k = argmin_k sum_{i=k}^{k+w-1} -log P(x_i | x_<i), the segment whose own
  tokens the current model already predicts best, from per-token losses of a clean forward
  (see sft.py: one extra no-grad forward per step).

All draws come from the `generator` passed in, so a run is reproducible from (seed, step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specbench_cli.errors import UsageError

KINDS = ("ahead", "random")
POSITIONS = ("random", "loss")


@dataclass(frozen=True)
class NoiseConfig:
    length: int = 4
    kind: str = "ahead"
    position: str = "random"

    def validate(self) -> "NoiseConfig":
        if self.length < 1:
            raise UsageError(f"--noise-length must be >= 1, got {self.length}")
        if self.kind not in KINDS:
            raise UsageError(f"--noise must be one of {', '.join(KINDS)}, got '{self.kind}'")
        if self.position not in POSITIONS:
            raise UsageError(f"--noise-position must be one of {', '.join(POSITIONS)}, got '{self.position}'")
        return self


def window(start: int, end: int, length: int, generator: Any, token_ce=None) -> tuple[int, int]:
    """Noise window [k, k + w) of one example with loss positions [start, end) (start = P-1,
    end = P+R-1). Admissible inputs are P .. P+R-2 = [start+1, end); w = min(length, end-start-1).
    `token_ce` (T,) float: token_ce[t] = -log P(x_{t+1} | x_<=t) of the clean sequence; when given,
    k minimises the summed loss of the replaced tokens (Eq. 5), else k is uniform.
    Returns (k, k) when the response has a single token (nothing to noise)."""
    import torch

    first, w = start + 1, min(length, end - start - 1)
    if w <= 0:
        return first, first
    n_starts = end - w - first + 1
    if token_ce is None:
        k = first + int(torch.randint(n_starts, (1,), generator=generator))
    else:
        # loss of token x_i sits at position i-1: window [k, k+w) -> token_ce[k-1 : k-1+w]
        sums = token_ce[first - 1:end - 1].float().unfold(0, w, 1).sum(-1)  # (n_starts,)
        k = first + int(torch.argmin(sums))
    return k, k + w


def noise_tokens(ids, k: int, w: int, kind: str, vocab_size: int, generator: Any):
    """Noise for positions k .. k+w-1 of one sequence ids (T,) long -> (w,) long."""
    import torch

    if kind == "random":
        return torch.randint(vocab_size, (w,), generator=generator)
    # ahead: for position i = k + m pick j uniform in [0, i); floor(u * i) with u in [0, 1)
    limits = torch.arange(k, k + w, dtype=torch.float64)
    j = (torch.rand(w, generator=generator, dtype=torch.float64) * limits).long()
    return ids[j.to(ids.device)].cpu()


def apply_noise(ids, examples: list, cfg: NoiseConfig, vocab_size: int, generator: Any, token_ce=None):
    """Noised copy of a collated batch.

    ids (B, T) long (gold, right-padded, row b = examples[b]); token_ce (B, T) float or None
    (needed for position "loss"). Returns (noisy_ids (B, T) long, noise_mask (B, T) bool marking
    the replaced positions). Labels are untouched: the caller keeps using `ids` as targets."""
    import torch

    noisy = ids.clone()
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for b, ex in enumerate(examples):
        ce = token_ce[b] if (cfg.position == "loss" and token_ce is not None) else None
        if cfg.position == "loss" and ce is None:
            raise ValueError("noise position 'loss' needs token_ce")
        k, hi = window(ex.start, ex.end, cfg.length, generator, ce)
        if hi > k:
            noisy[b, k:hi] = noise_tokens(ids[b], k, hi - k, cfg.kind, vocab_size, generator).to(ids.device)
            mask[b, k:hi] = True
    return noisy, mask
