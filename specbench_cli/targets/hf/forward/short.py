"""`--forward short`: attention for the few query rows a decode or verify step has (q <= 64),
registered with transformers' attention interface (docs/performance.md has the measurements).

Each group of query heads that share a key/value head is scored against that head's keys in one
matmul (no repeat_kv copy of the cache); the engine's additive tree mask, or a causal mask for
the last q columns, is applied; softmax in float32; one more matmul. Longer inputs (a prompt's
prefill) fall back to SDPA.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from specbench_cli.lazy import torch  # imported while planning: no torch import at module load

SHORT_MAX_Q = 64  # above this the score matrix is big enough for SDPA's blocked kernel to win


def short_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: Optional[torch.Tensor], scaling: float, dropout: float = 0.0,
                    force: bool = False, **kwargs) -> tuple[torch.Tensor, None]:
    """Grouped-query attention for short inputs.

    query: `[b, H, q, d]`; key, value: `[b, Hkv, L, d]` (the cache, new tokens last);
    attention_mask: None (causal), bool `[b, 1, q, L]` (True = visible) or additive float
    `[b, 1, q, L]` (the engine's tree mask). Returns `[b, q, H, d]` and no weights.
    `force`: this kernel even past SHORT_MAX_Q rows (the lean forward's timed plan decides).
    """
    b, h, q, d = query.shape
    hkv, length = key.shape[1], key.shape[2]
    if (q > SHORT_MAX_Q and not force) or dropout > 0.0:
        return _long_attention(query, key, value, attention_mask, scaling, dropout)
    g = h // hkv
    # Query heads i*g .. i*g+g-1 share key/value head i (repeat_kv's order), so a reshape groups them.
    scores = torch.matmul(query.reshape(b, hkv, g * q, d), key.transpose(2, 3))  # [b, Hkv, g*q, L]
    scores = scores.view(b, hkv, g, q, length)
    scores.mul_(scaling)
    if attention_mask is None:
        if q > 1:  # causal among the q new tokens; every cached token is visible
            scores[..., length - q:].masked_fill_(_causal_hide(q, query.device), float("-inf"))
    elif attention_mask.dtype == torch.bool:
        scores.masked_fill_(~attention_mask[:, :, None, :, -length:], float("-inf"))
    else:
        scores.add_(attention_mask[:, :, None, :, -length:])
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.matmul(probs.view(b, hkv, g * q, length), value)  # [b, Hkv, g*q, d]
    return out.view(b, h, q, d).transpose(1, 2), None


@functools.lru_cache(maxsize=64)
def _causal_hide(q: int, device: Any) -> torch.Tensor:
    """`[q, q]` bool, True above the diagonal. Called by every layer of every forward: built once per q."""
    return torch.ones((q, q), dtype=torch.bool, device=device).triu_(1)


def long_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor],
                   scaling: float) -> torch.Tensor:
    """SDPA over `[b, H, q, d]` queries and the `[b, Hkv, L, d]` cache, `[b, q, H, d]` out (mask as
    for `short_attention`; None: causal with the new rows last)."""
    return _long_attention(query, key, value, mask, scaling, 0.0)[0]


def _long_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor],
                    scaling: float, dropout: float) -> tuple[torch.Tensor, None]:
    """Many query rows (a prefill): SDPA. A missing mask means causal with the new rows last,
    which SDPA's `is_causal` only gets right when there is no cache (it aligns top-left)."""
    q, length = query.shape[2], key.shape[2]
    if mask is None and q > 1 and q != length:
        mask = torch.ones((q, length), dtype=torch.bool, device=query.device).tril_(length - q)
    elif mask is not None:
        mask = mask[..., -length:]
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                         is_causal=mask is None and q > 1, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2), None


def short_mask(*, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
               attention_mask: Optional[torch.Tensor] = None, local_size: Optional[int] = None,
               allow_is_causal_skip: bool = True, **kwargs) -> Optional[torch.Tensor]:
    """The mask transformers builds for `short`: None for a plain causal block of at most
    `SHORT_MAX_Q` new tokens after the cache (the kernel masks those itself, so no `[q, L]`
    mask is allocated per step), else whatever SDPA would get."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    plain = (kwargs.get("mask_function", causal_mask_function) is causal_mask_function and attention_mask is None
             and local_size is None and kv_offset == 0 and kv_length == q_offset + q_length)
    if allow_is_causal_skip and plain and q_length <= SHORT_MAX_Q:
        return None
    return sdpa_mask(q_length=q_length, kv_length=kv_length, q_offset=q_offset, kv_offset=kv_offset,
                     attention_mask=attention_mask, local_size=local_size,
                     allow_is_causal_skip=allow_is_causal_skip, **kwargs)


def register() -> None:
    """Make `short` a name transformers accepts as `attn_implementation` (idempotent); a 4-D
    mask the engine passes (trees) reaches `short_attention` unchanged."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register("short", short_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register("short", short_mask)
