"""One KV cache for every method: preallocated buffers with rollback.

transformers' `DynamicLayer` grows by `torch.cat` on every forward (a full copy of the cache
per step) and only crops from the end. Speculative decoding needs two more things: dropping
rejected draft tokens (crop, for chains) and keeping only the accepted path of a tree
(compaction: move the accepted nodes' keys/values into contiguous slots). `BufferLayer`
keeps keys/values in a buffer that doubles when full; `update` writes in place and returns
views, `crop` only moves the length, `compact` gathers along the sequence dim.

The model only ever sees a `transformers.Cache` whose layers are `BufferLayer`s; every
cache internal the engine touches lives in this file.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class BufferLayer(DynamicLayer):
    """Keys/values of one layer, shape `[batch, kv_heads, capacity, head_dim]`, first `length` valid."""

    initial_capacity = 512

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, d = key_states.shape
        self._k = key_states.new_empty((b, h, self.initial_capacity, d))
        self._v = value_states.new_empty((b, h, self.initial_capacity, value_states.shape[-1]))
        self.length = 0
        self.keys = self._k[:, :, :0]
        self.values = self._v[:, :, :0]
        self.is_initialized = True

    def _reserve(self, needed: int) -> None:
        cap = self._k.shape[2]
        if needed <= cap:
            return
        while cap < needed:
            cap *= 2
        k = self._k.new_empty((*self._k.shape[:2], cap, self._k.shape[3]))
        v = self._v.new_empty((*self._v.shape[:2], cap, self._v.shape[3]))
        k[:, :, : self.length] = self._k[:, :, : self.length]
        v[:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v = k, v

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        q = key_states.shape[2]
        end = self.length + q
        self._reserve(end)
        self._k[:, :, self.length:end] = key_states
        self._v[:, :, self.length:end] = value_states
        self.length = end
        self.keys = self._k[:, :, :end]
        self.values = self._v[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last `-tokens_to_remove` tokens (a negative count, as transformers 5 expects)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of tokens to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self.set_length(self.length + tokens_to_remove)

    def set_length(self, length: int) -> None:
        self.length = length
        self.keys = self._k[:, :, :length]
        self.values = self._v[:, :, :length]

    def compact(self, start: int, keep: torch.Tensor) -> None:
        """Keep slots `start + keep` (ascending) as slots `start .. start+len(keep)-1`, drop the rest."""
        src = keep + start
        n = keep.numel()
        self._k[:, :, start:start + n] = self._k.index_select(2, src)
        self._v[:, :, start:start + n] = self._v.index_select(2, src)
        self.set_length(start + n)

    def reset(self) -> None:
        if self.is_initialized:
            self.set_length(0)


class KVCache:
    """The engine's handle on a model's cache.

    `hf` is what is passed to the model as `past_key_values`. `length` is the number of
    tokens whose keys/values are stored.
    """

    def __init__(self) -> None:
        self.hf = Cache(layer_class_to_replicate=BufferLayer)

    @property
    def length(self) -> int:
        return self.hf.layers[0].get_seq_length() if self.hf.layers else 0

    def crop_to(self, length: int) -> None:
        """Keep the first `length` tokens (chain rollback)."""
        for layer in self.hf.layers:
            if layer.is_initialized:
                layer.set_length(length)

    def keep(self, start: int, offsets: list[int]) -> None:
        """Keep tokens `start + o` for `o` in `offsets` (ascending), packed from `start`; drop all after.

        A prefix `offsets == [0, 1, ..., k-1]` is a crop and copies nothing.
        """
        if offsets == list(range(len(offsets))):
            self.crop_to(start + len(offsets))
            return
        idx = torch.tensor(offsets, dtype=torch.long, device=self.hf.layers[0].device)
        for layer in self.hf.layers:
            if layer.is_initialized:
                layer.compact(start, idx)

    def reset(self) -> None:
        for layer in self.hf.layers:
            layer.reset()
