"""The transformers target's KV cache (targets/hf/target.py): preallocated buffers with rollback.

transformers' `DynamicLayer` grows by `torch.cat` on every forward (a full copy of the cache
per step) and only crops from the end. Speculative decoding needs two more things: dropping
rejected draft tokens (crop, for chains) and keeping only the accepted path of a tree
(compaction: move the accepted nodes' keys/values into contiguous slots). `BufferLayer`
keeps keys/values in a buffer that doubles when full; `update` writes in place and returns
views, `crop` only moves the length, `compact` gathers along the sequence dim.

The model only ever sees a `transformers.Cache` whose layers are `BufferLayer`s; every
cache internal lives in this file, and only `HFTarget` (and a drafter's own transformers model,
through `HFTarget` too) uses it.
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
        k = self._grown(self._k, cap)
        v = self._grown(self._v, cap)
        k[:, :, : self.length] = self._k[:, :, : self.length]
        v[:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v = k, v

    @staticmethod
    def _grown(buf, cap: int):
        """A buffer like `buf` with room for `cap` positions (contents not yet copied)."""
        return buf.new_empty((*buf.shape[:2], cap, buf.shape[3]))

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


class BatchBufferLayer(BufferLayer):
    """Keys/values of one layer for a batch: `[rows, kv_heads, capacity, head_dim]`, one row per
    sequence, the first `rows` live. Slot `s` of a row is just storage: which slots hold a
    sequence's tokens is `BatchKVCache`'s business (`starts`, `ends`), and the attention mask
    hides the rest. Zero-filled, so the slots a mask hides never hold NaN or inf (an additive
    mask adds a large negative number to the score; NaN would survive that)."""

    def __init__(self, rows: int, capacity: int) -> None:
        super().__init__()
        self.rows = rows
        self.capacity = capacity

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        _, h, _, d = key_states.shape
        self._k = key_states.new_zeros((self.rows, h, self.capacity, d))
        self._v = value_states.new_zeros((self.rows, h, self.capacity, value_states.shape[-1]))
        self.length = 0
        self.is_initialized = True
        self.set_length(0)

    @staticmethod
    def _grown(buf, cap: int):
        """Zeroed: slots a sequence never wrote stay finite under the mask (BufferLayer._reserve grows)."""
        return buf.new_zeros((*buf.shape[:2], cap, buf.shape[3]))

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if key_states.shape[0] != self.rows:
            raise ValueError(f"the batch cache holds {self.rows} live rows, the forward has {key_states.shape[0]}")
        end = self.length + key_states.shape[2]
        self._reserve(end)
        self._k[: self.rows, :, self.length:end] = key_states
        self._v[: self.rows, :, self.length:end] = value_states
        self.set_length(end)
        return self.keys, self.values

    def set_length(self, length: int) -> None:
        self.length = length
        self.keys = self._k[: self.rows, :, :length]
        self.values = self._v[: self.rows, :, :length]

    def move(self, rows: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy slot `src[i]` of row `rows[i]` to slot `dst[i]` of the same row, for every i at once
        (the sources are read before anything is written)."""
        self._k[rows, :, dst] = self._k[rows, :, src]
        self._v[rows, :, dst] = self._v[rows, :, src]

    def add_row(self) -> int:
        """One more live row (its slots as they are: the mask hides them until written); the
        buffers grow along the row dimension when every allocated row is live."""
        if self._k.shape[0] == self.rows:
            grow = max(1, self.rows)
            self._k = torch.cat([self._k, self._k.new_zeros((grow, *self._k.shape[1:]))])
            self._v = torch.cat([self._v, self._v.new_zeros((grow, *self._v.shape[1:]))])
        self.rows += 1
        self.set_length(self.length)
        return self.rows - 1

    def shift_row(self, row: int, start: int, end: int, to: int) -> None:
        """Move row `row`'s slots `start .. end-1` to `to .. to+end-start-1` (`to` <= `start`)."""
        if to != start and end > start:
            self._k[row, :, to:to + end - start] = self._k[row, :, start:end].clone()
            self._v[row, :, to:to + end - start] = self._v[row, :, start:end].clone()

    def drop_row(self, row: int) -> None:
        """Remove live row `row`: the last live row takes its place (one row copied, not the cache)."""
        last = self.rows - 1
        if row != last:
            self._k[row, :, : self.length] = self._k[last, :, : self.length]
            self._v[row, :, : self.length] = self._v[last, :, : self.length]
        self.rows = last
        self.set_length(self.length)


class BatchKVCache:
    """The engine's handle on a batch's cache: one row per live sequence.

    Row r holds its sequence's tokens in slots `starts[r] .. ends[r]-1`, packed; every forward
    writes its new tokens at the common slot `length` (the largest end), so a sequence that has
    accepted fewer tokens than another has unused slots between its end and `length`, which its
    attention mask hides. After a verdict `keep` packs each sequence's root and accepted nodes
    right after its own end. The position of a token is its slot minus its row's start.
    """

    def __init__(self, rows: int, capacity: int) -> None:
        self.hf = Cache(layer_class_to_replicate=lambda: BatchBufferLayer(rows, capacity))
        self.starts = [0] * rows
        self.ends = [0] * rows

    @property
    def rows(self) -> int:
        return len(self.ends)

    @property
    def length(self) -> int:
        """The slot the next forward writes at (the largest end)."""
        return self.hf.layers[0].get_seq_length() if self.hf.layers else 0

    def load_row(self, row: int, single: KVCache, end: int) -> None:
        """Copy the keys/values of a batch-1 cache (a prompt's prefill) into row `row` so that they
        end at slot `end`, and make `end` the write slot. Every row must be loaded before decoding."""
        n = single.length
        for layer_idx, src in enumerate(single.hf.layers):
            dst = self._layer(layer_idx, src)
            self._copy_in(dst, row, src, end, n)
            dst.set_length(end)
        self.starts[row], self.ends[row] = end - n, end

    def _layer(self, layer_idx: int, src: BufferLayer) -> "BatchBufferLayer":
        """Layer `layer_idx` of the batch, made (and sized like `src`) when it is not there yet."""
        while len(self.hf.layers) <= layer_idx:
            self.hf.layers.append(self.hf.layer_class_to_replicate())
        dst = self.hf.layers[layer_idx]
        if not dst.is_initialized:
            dst.lazy_initialization(src.keys, src.values)
        return dst

    @staticmethod
    def _copy_in(dst: "BatchBufferLayer", row: int, src: BufferLayer, end: int, n: int) -> None:
        """`src`'s n tokens into row `row` of `dst`, ending at slot `end`."""
        dst._reserve(end)
        dst._k[row, :, end - n:end] = src.keys[0]
        dst._v[row, :, end - n:end] = src.values[0]

    def add_row(self, single: KVCache) -> int:
        """A new last row holding a batch-1 cache's tokens (a prompt's prefill), ending at the
        write slot, or at its own length when that is longer (the write slot then moves there:
        the other rows' unused slots before it stay hidden by their masks). Returns the row.
        A batch whose rows all left starts again at slot 0."""
        n = single.length
        end = max(self.length if self.rows else 0, n)
        for layer_idx, src in enumerate(single.hf.layers):
            dst = self._layer(layer_idx, src)
            self._copy_in(dst, dst.add_row(), src, end, n)
        self.starts.append(end - n)
        self.ends.append(end)
        for layer in self.hf.layers:
            layer.set_length(end)
        return self.rows - 1

    def pack(self) -> None:
        """Move every row's tokens to the front of its row (slots `0 .. len-1`; positions are a
        slot minus its row's start, so none changes), when the write slot is more than twice the
        longest row: rows that joined a running batch start late, and once the rows before them
        leave, the slots before every start would be attended over (masked) at every step."""
        longest = max((e - s for s, e in zip(self.starts, self.ends)), default=0)
        if not self.rows or self.length <= 2 * longest + 16:
            return
        for r, (s, e) in enumerate(zip(self.starts, self.ends)):
            for layer in self.hf.layers:
                layer.shift_row(r, s, e, 0)
            self.starts[r], self.ends[r] = 0, e - s
        for layer in self.hf.layers:
            layer.set_length(longest)

    def keep(self, past: int, offsets: list[list[int]]) -> None:
        """After a forward that wrote at slot `past`: per row, keep the slots `past + o` for `o` in
        `offsets[row]` (ascending), packed right after the row's end, and drop the rest; the write
        slot becomes the largest new end."""
        base = past
        rows, src, dst = [], [], []
        for r, offs in enumerate(offsets):
            end = self.ends[r]
            for j, o in enumerate(offs):
                if base + o != end + j:
                    rows.append(r)
                    src.append(base + o)
                    dst.append(end + j)
            self.ends[r] = end + len(offs)
        if rows:
            device = self.hf.layers[0].device
            idx = [torch.tensor(v, dtype=torch.long, device=device) for v in (rows, src, dst)]
            for layer in self.hf.layers:
                layer.move(*idx)
        new_length = max(self.ends, default=0)
        for layer in self.hf.layers:
            layer.set_length(new_length)

    def crop_to(self, length: int) -> None:
        """Forget every slot from `length` on (rows' ends must not pass it): a forward rolled back."""
        for layer in self.hf.layers:
            layer.set_length(length)

    def drop(self, row: int) -> None:
        """Remove a finished sequence's row; the last row moves into its place (callers reorder likewise)."""
        for layer in self.hf.layers:
            layer.drop_row(row)
        last = self.rows - 1
        self.starts[row], self.ends[row] = self.starts[last], self.ends[last]
        del self.starts[last], self.ends[last]
        new_length = max(self.ends, default=0)
        for layer in self.hf.layers:
            layer.set_length(new_length)

    def extract(self, row: int) -> KVCache:
        """Row `row`'s tokens as a batch-1 cache (positions from 0), e.g. for a lossy method's epilogue."""
        out = KVCache()
        s, e = self.starts[row], self.ends[row]
        for layer_idx, layer in enumerate(self.hf.layers):
            out.hf.update(layer._k[row:row + 1, :, s:e].clone(), layer._v[row:row + 1, :, s:e].clone(), layer_idx)
        return out
