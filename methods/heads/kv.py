"""The KV cache of the EAGLE heads (EAGLE-1/2 and EAGLE-3)."""

from __future__ import annotations

import torch


class HeadKV:
    """Minimal KV cache of the EAGLE head: per layer [1, kv_heads, S, d] keys and values.

    Implements the one method transformers' attention calls (`update`), plus `crop`/`keep`."""

    def __init__(self) -> None:
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args, **kwargs):
        if layer_idx in self.k:
            k, v = torch.cat([self.k[layer_idx], k], dim=-2), torch.cat([self.v[layer_idx], v], dim=-2)
        self.k[layer_idx], self.v[layer_idx] = k, v
        return k, v

    @property
    def length(self) -> int:
        return next(iter(self.k.values())).shape[-2] if self.k else 0

    def crop(self, length: int) -> None:
        """Keep the first `length` entries (drop drafted nodes / rejected tokens)."""
        for i in self.k:
            self.k[i], self.v[i] = self.k[i][..., :length, :], self.v[i][..., :length, :]

    def keep(self, start: int, rows: list[int]) -> None:
        """Keep entries [:start] plus entries start + r for r in `rows` (an accepted tree path)."""
        idx = torch.tensor(list(range(start)) + [start + r for r in rows])
        for i in self.k:
            self.k[i], self.v[i] = self.k[i].index_select(-2, idx), self.v[i].index_select(-2, idx)



class CachedHeadMixin:
    """The inference API the EAGLE tree builders call, for a head with `_run(features, tokens,
    positions, mask, cache) -> [B,T,h]`, `logits(states)` and `config`: `new_cache()`, and
    `step(cache, features [n,.], tokens [n], positions [n], mask [n, cache.length + n] | None)
    -> (outputs [n, h] to feed back, logits [n, V or V'])`, which appends the n pairs to the cache
    (mask None = causal over the n new pairs)."""

    @staticmethod
    def new_cache() -> HeadKV:
        return HeadKV()

    @torch.no_grad()
    def step(self, cache: HeadKV, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
             mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        n, past = tokens.shape[0], cache.length
        if mask is None:
            mask = torch.ones(n, past + n, dtype=torch.bool, device=tokens.device)
            mask[:, past:] = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()
        out = self._run(features[None], tokens[None], positions[None], mask[None, None], cache)[0]
        return out, self.logits(out)

    def config_dict(self) -> dict:
        return self.config.to_dict()
