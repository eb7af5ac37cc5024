"""Drafts as token trees, and the attention inputs that let one forward verify a whole tree.

A draft has `n` nodes. Node `i` holds `tokens[i]` and hangs below `parents[i]`: `-1` means
the root, the last accepted token (not yet in the KV cache, fed first in every verify
forward); otherwise an earlier node index (`parents[i] < i`). A chain is
`parents == [-1, 0, 1, ..., n-2]`.

In the verify forward the root is query row 0 and node `i` is row `i + 1`; each row sees the
cached prefix, itself and its ancestors, and sits at position `past + depth`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from specbench_cli.lazy import torch


@dataclass
class Draft:
    """What a drafter proposes for one step.

    tokens:     `[n]` token ids (ignored for nodes that carry an embedding).
    parents:    `[n]` parent index per node, `-1` = root, `parents[i] < i`.
    probs:      optional `[n, V]` drafter distribution each node's token was sampled from
                (only for speculative sampling with a draft model; `None` otherwise).
    acceptable: optional `[n]` bools; `False` marks nodes that are inputs only (lookahead's
                window, mask-probe's mask tokens) and can never be accepted. Default: all True.
    embeds:     optional `{node index: [H] tensor}` input embeddings used instead of the
                token embedding (mask tokens synthesised in embedding space).
    signal:     optional `[n]` small integers, the drafter's confidence class of each node (the
                matched n-gram's length, a probability in tenths): what an adaptive budget
                (decoding/budget.py) learns acceptance rates for. Never changes verification.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: Optional[torch.Tensor] = None
    acceptable: Optional[list[bool]] = None
    embeds: Optional[dict[int, torch.Tensor]] = None
    signal: Optional[list[int]] = None

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain(cls, tokens: list[int], probs: Optional[torch.Tensor] = None,
              signal: Optional[list[int]] = None) -> "Draft":
        return cls(tokens=list(tokens), parents=list(range(-1, len(tokens) - 1)), probs=probs, signal=signal)

    @property
    def is_chain(self) -> bool:
        return is_chain(tuple(self.parents))

    def n_acceptable(self) -> int:
        return len(self.tokens) if self.acceptable is None else sum(self.acceptable)

    def validate(self) -> None:
        if len(self.parents) != len(self.tokens):
            raise ValueError(f"draft has {len(self.tokens)} tokens but {len(self.parents)} parents")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"node {i} has parent {p}; parents must point to an earlier node or -1")
        if self.acceptable is not None and len(self.acceptable) != len(self.tokens):
            raise ValueError("acceptable must have one flag per node")
        if self.signal is not None and len(self.signal) != len(self.tokens):
            raise ValueError("signal must have one class per node")


@lru_cache(maxsize=4096)
def is_chain(parents: tuple[int, ...]) -> bool:
    return all(p == i - 1 for i, p in enumerate(parents))


@lru_cache(maxsize=1024)
def depths(parents: tuple[int, ...]) -> tuple[int, ...]:
    """Depth of each node below the root (a root child has depth 1)."""
    d: list[int] = []
    for p in parents:
        d.append(1 if p < 0 else d[p] + 1)
    return tuple(d)


@lru_cache(maxsize=1024)
def _tree_mask_bool(parents: tuple[int, ...]) -> torch.Tensor:
    """`[n+1, n+1]` bool: row r may attend to column c among root + nodes (ancestor-or-self)."""
    n = len(parents)
    m = torch.zeros((n + 1, n + 1), dtype=torch.bool)
    m[:, 0] = True
    for i, p in enumerate(parents):
        row = i + 1
        if p >= 0:
            m[row] = m[p + 1]
        m[row, row] = True
    return m


@lru_cache(maxsize=1024)
def _local_additive(parents: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """`[n+1, n+1]` additive mask among root + nodes, on the CPU."""
    hidden = ~_tree_mask_bool(parents)
    return torch.zeros(hidden.shape, dtype=dtype).masked_fill_(hidden, torch.finfo(dtype).min)


@lru_cache(maxsize=1024)
def _position_offsets(parents: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor((0,) + depths(parents), dtype=torch.long)


def tree_inputs(parents: list[int] | tuple[int, ...], past: int, dtype: torch.dtype,
                device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mask and position ids for verifying root + tree after `past` cached tokens.

    Returns:
        mask: `[1, 1, n+1, past+n+1]` additive float mask (0 visible, dtype min hidden). A bool
              4-D mask is silently wrong under eager attention, so the engine always passes floats.
        position_ids: `[1, n+1]`, `past + depth`.
    """
    key = tuple(parents)
    local = _local_additive(key, dtype)
    q = local.shape[0]
    mask = torch.zeros((1, 1, q, past + q), dtype=dtype, device=device)
    mask[0, 0, :, past:] = local.to(device, non_blocking=True)
    pos = (_position_offsets(key) + past).to(device).unsqueeze(0)
    return mask, pos


def children_lists(parents: list[int] | tuple[int, ...]) -> list[list[int]]:
    """`[n+1]` lists: entry 0 holds the root's children, entry i+1 node i's children (node indices)."""
    out: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents):
        out[p + 1].append(i)
    return out


def path_to(parents: list[int] | tuple[int, ...], node: int) -> list[int]:
    """Node indices from the root's child down to `node`."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def paths_to_parents(paths: list[list[int]]) -> tuple[list[int], list[tuple[int, ...]]]:
    """Merge paths of choice indices (Medusa-style, e.g. `[[0], [0, 1], [1]]`) into a tree.

    Returns `(parents, keys)`: one node per distinct prefix, in breadth-first order, where
    `keys[i]` is the prefix tuple of node `i`. Used by drafters whose tree template is data.
    """
    prefixes = sorted({tuple(p[:k]) for p in paths for k in range(1, len(p) + 1)}, key=lambda t: (len(t), t))
    index = {pre: i for i, pre in enumerate(prefixes)}
    parents = [index[pre[:-1]] if len(pre) > 1 else -1 for pre in prefixes]
    return parents, prefixes


def batch_tree_inputs(parents: list[list[int] | tuple[int, ...]], starts: list[int], ends: list[int], past: int,
                      q: int, dtype: torch.dtype, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mask and position ids for one forward over B sequences' roots + trees, each
    padded to `q` rows, after `past` cache slots (`targets/hf/kv.py: BatchKVCache`).

    Row r of sequence b is its root (r = 0), node r-1 (r <= n_b), or padding. A real row sees
    the sequence's cached slots `starts[b] .. ends[b]-1` and, among the new rows, itself and its
    ancestors; a padding row sees the cached slots and itself (so its softmax is well defined;
    its output is never read). Position of a real row: `ends[b] - starts[b] + depth`; padding
    rows repeat the root's.

    Returns:
        mask: `[B, 1, q, past + q]` additive float mask (0 visible, dtype min hidden).
        position_ids: `[B, q]`.
    """
    b = len(parents)
    low = torch.finfo(dtype).min
    cols = torch.arange(past)
    start = torch.tensor(starts, dtype=torch.long)[:, None]
    end = torch.tensor(ends, dtype=torch.long)[:, None]
    mask = torch.full((b, 1, q, past + q), low, dtype=dtype)
    mask[:, 0, :, :past].masked_fill_(((cols >= start) & (cols < end))[:, None, :], 0.0)
    block = mask[:, 0, :, past:]
    block.diagonal(dim1=1, dim2=2).fill_(0.0)
    pos = torch.empty((b, q), dtype=torch.long)
    for i, tree in enumerate(parents):
        key = tuple(tree)
        n = len(key) + 1
        if n > 1:
            block[i, :n, :n] = _local_additive(key, dtype)
        root = ends[i] - starts[i]
        pos[i] = root
        pos[i, :n] += _position_offsets(key)
    return mask.to(device), pos.to(device)
