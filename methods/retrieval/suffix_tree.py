"""SuffixDecoding's suffix trees (Oliaro et al. 2024, arXiv 2411.04975), written to draft exactly
what the reference implementation drafts (ArcticInference's `arctic_inference.suffix_decoding`,
`csrc/suffix_decoding/suffix_tree.cc`): the same trees, token for token, the same parents,
probabilities, scores and match lengths (tests/methods/test_suffix_tree.py). The per-request
cache over such trees (the reference's `cache.py`) is `suffix_cache.py`, kept apart as the
reference and vLLM keep it.

A `SuffixTree` holds every suffix of one or more token sequences, each cut at `max_depth`
tokens, as a path-compressed trie: a node is a run of tokens that every suffix through it shares,
stored as a reference (`ref_seq`, `ref_idx`, `length`) into one of the sequences, with `count` =
the number of suffixes that reach it. Appending a token to a sequence updates the (at most
`max_depth`) nodes where that sequence's suffixes end. Each node's children sit in a list of
decreasing count (ties in the order the reference's linked lists of equal-count groups give
them), so drafting visits the likeliest continuations first.

`speculate(context)`: for every suffix length L of the context that the tree holds, drafting
starts where that suffix ends. The draft grows best-first by the frequency-based probability of
each continuation (child count / parent count, multiplied along the path), never below
`min_token_prob`, up to min(max_spec_tokens, int(max_spec_factor * L + max_spec_offset))
tokens. Score = the sum of the drafted tokens' probabilities (the expected number of accepted
tokens); the best-scoring L wins, ties going to the longer match.

What exactness needs beyond the paper, all taken from the reference:
- arithmetic in float32 (probabilities, scores, the per-match cap), rounded after every
  operation as C++ `float` does;
- the best-first frontier is a binary max-heap with libstdc++'s `std::priority_queue`
  sift rules, so equal probabilities come out in the reference's order;
- sibling order among equal counts follows the reference's group lists exactly.

Two things are done faster than the reference's loop and give the same result: suffixes of the
context are tried from the longest down and the search stops once no shorter match can beat
the best score (a match of L tokens drafts at most its cap, each token with probability <= 1);
and when the context is the tail of the tree's only sequence (the per-request tree), where
each suffix ends is read from that sequence's active nodes instead of walking from the root.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Optional, Sequence

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """`x` rounded to the nearest float32 (as a Python float)."""
    return _F32.unpack(_F32.pack(x))[0]


class _Group:
    """Siblings with equal count; the groups of one parent form a list (the reference's `Group`)."""

    __slots__ = ("head", "next", "prev")

    def __init__(self, head: "_Node") -> None:
        self.head, self.next, self.prev = head, None, None


class _Node:
    __slots__ = ("count", "token", "length", "ref_seq", "ref_idx", "endpoints", "parent", "children",
                 "head_child", "tail_child", "next_sibling", "prev_sibling", "group")

    def __init__(self, count: int = 0, token: int = 0, length: int = 0, ref_seq: int = 0, ref_idx: int = -1) -> None:
        self.count, self.token, self.length, self.ref_seq, self.ref_idx = count, token, length, ref_seq, ref_idx
        self.endpoints: dict[int, int] = {}      # seq id -> end index of its suffix ending here
        self.parent: Optional[_Node] = None
        self.children: dict[int, _Node] = {}     # first token -> child
        self.head_child = self.tail_child = self.next_sibling = self.prev_sibling = None
        self.group: Optional[_Group] = None


# -- sibling lists in decreasing count (the reference's helpers, one for one) -----------------

def _remove_from_siblings(node: _Node) -> None:
    group = node.group
    if group.head is node:
        nxt = node.next_sibling
        if nxt is not None and nxt.count == node.count:
            group.head = nxt
            node.group = None
        else:  # alone in its group: the group leaves the list (the node keeps it)
            if group.prev is not None:
                group.prev.next = group.next
            if group.next is not None:
                group.next.prev = group.prev
            group.prev = group.next = None
    else:
        node.group = None
    if node.next_sibling is not None:
        node.next_sibling.prev_sibling = node.prev_sibling
    else:
        node.parent.tail_child = node.prev_sibling
    if node.prev_sibling is not None:
        node.prev_sibling.next_sibling = node.next_sibling
    else:
        node.parent.head_child = node.next_sibling
    node.prev_sibling = node.next_sibling = None


def _insert_before(node: _Node, other: _Node) -> None:
    if other.prev_sibling is not None:
        other.prev_sibling.next_sibling = node
    else:
        node.parent.head_child = node
    node.next_sibling = other
    node.prev_sibling = other.prev_sibling
    other.prev_sibling = node
    prev = node.prev_sibling
    if prev is not None and node.count == prev.count:
        node.group = prev.group
    elif node.count == other.count:
        node.group = other.group
        node.group.head = node
    else:
        group = node.group
        if group is None:
            group = node.group = _Group(node)
        if prev is not None:
            group.prev = prev.group
            group.prev.next = group
        group.next = other.group
        group.next.prev = group


def _insert_after(node: _Node, other: _Node) -> None:
    if other.next_sibling is not None:
        other.next_sibling.prev_sibling = node
    else:
        node.parent.tail_child = node
    node.prev_sibling = other
    node.next_sibling = other.next_sibling
    other.next_sibling = node
    nxt = node.next_sibling
    if nxt is not None and node.count == nxt.count:
        node.group = nxt.group
        if node.group.head is nxt:
            node.group.head = node
    elif node.count == other.count:
        node.group = other.group
    else:
        group = node.group
        if group is None:
            group = node.group = _Group(node)
        if nxt is not None:
            group.next = nxt.group
            group.next.prev = group
        group.prev = other.group
        group.prev.next = group


def _replace_in_siblings(old: _Node, new: _Node) -> None:
    if old.next_sibling is not None:
        old.next_sibling.prev_sibling = new
    else:
        old.parent.tail_child = new
    if old.prev_sibling is not None:
        old.prev_sibling.next_sibling = new
    else:
        old.parent.head_child = new
    new.prev_sibling, new.next_sibling = old.prev_sibling, old.next_sibling
    old.prev_sibling = old.next_sibling = None
    if old.group.head is old:
        old.group.head = new
    new.group, old.group = old.group, None


def _increment(node: _Node) -> None:
    if node.parent is None:
        node.count += 1
        return
    prev = node.prev_sibling
    if prev is None or prev.count > node.count + 1:
        nxt = node.next_sibling
        if nxt is not None and nxt.count >= node.count:  # split off ahead of its group
            orig = node.group
            orig.head = nxt
            new = _Group(node)
            new.next = orig
            if orig.prev is not None:
                new.prev = orig.prev
                new.prev.next = new
            orig.prev = new
            node.group = new
        node.count += 1
    else:
        other = prev.group.head
        _remove_from_siblings(node)
        node.count += 1
        _insert_before(node, other)


def _decrement(node: _Node) -> None:
    if node.parent is None:
        node.count -= 1
        return
    nxt = node.next_sibling
    if nxt is None or nxt.count < node.count - 1:
        prev = node.prev_sibling
        if prev is not None and prev.count <= node.count:  # split off behind its group
            orig = node.group
            new = _Group(node)
            new.prev = orig
            if orig.next is not None:
                new.next = orig.next
                new.next.prev = new
            orig.next = new
            node.group = new
        node.count -= 1
    elif nxt.count == node.count - 1:  # joins the next group as its head
        nxt.group.head = node
        if node.group.head is node:
            group = node.group
            if group.prev is not None:
                group.prev.next = group.next
            group.next.prev = group.prev
        node.group = nxt.group
        node.count -= 1
    else:
        other_group = node.group.next
        _remove_from_siblings(node)
        node.count -= 1
        if other_group is None:
            _insert_after(node, node.parent.tail_child)
        else:
            _insert_before(node, other_group.head)


# -- the best-first frontier: libstdc++'s binary heap, so ties pop in the reference's order ----

def _heap_push(heap: list, item: tuple) -> None:
    heap.append(item)
    hole = len(heap) - 1
    p = item[0]
    while hole > 0:
        parent = (hole - 1) >> 1
        if not heap[parent][0] < p:
            break
        heap[hole] = heap[parent]
        hole = parent
    heap[hole] = item


def _heap_pop(heap: list) -> tuple:
    top, last = heap[0], heap.pop()
    n = len(heap)
    if n == 0:
        return top
    hole = second = 0
    while second < (n - 1) >> 1:
        second = 2 * (second + 1)
        if heap[second][0] < heap[second - 1][0]:
            second -= 1
        heap[hole] = heap[second]
        hole = second
    if n & 1 == 0 and second == (n - 2) >> 1:
        second = 2 * (second + 1)
        heap[hole] = heap[second - 1]
        hole = second - 1
    p = last[0]
    while hole > 0:
        parent = (hole - 1) >> 1
        if not heap[parent][0] < p:
            break
        heap[hole] = heap[parent]
        hole = parent
    heap[hole] = last
    return top


@dataclass
class SuffixDraft:
    """A speculation: `token_ids[i]` hangs below `parents[i]` (-1 = after the context),
    `probs[i]` its estimated probability, `score` their float32 sum, `match_len` the context
    suffix it continues."""

    token_ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0


class SuffixTree:
    """Suffixes (at most `max_depth` tokens) of sequences keyed by integer ids."""

    def __init__(self, max_depth: int) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        self.max_depth = max_depth
        self.root = _Node()
        self.seqs: dict[int, list[int]] = {}
        self.active: dict[int, deque] = {}   # seq id -> nodes where its last max_depth suffixes end

    def num_seqs(self) -> int:
        return len(self.seqs)

    # -- growing and shrinking ------------------------------------------------------------------
    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(seq_id, int(token))

    def append(self, seq_id: int, token: int) -> None:
        """Add `token` to sequence `seq_id` (created when new): every suffix ending at the old end
        grows by one token, and a new one-token suffix starts."""
        seq = self.seqs.get(seq_id)
        if seq is None:
            seq = self.seqs[seq_id] = []
            self.active[seq_id] = deque()
        active = self.active[seq_id]
        root = self.root
        active.append(root)
        root.endpoints[seq_id] = len(seq)
        root.count += 1
        if len(active) > self.max_depth:
            active.popleft()
        seq.append(token)
        seq_len = len(seq)
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                if node.count == 1 and node is not root:  # a leaf only this suffix reaches: lengthen it
                    node.length += 1
                    node.endpoints[seq_id] += 1
                else:  # a new leaf below the node
                    leaf = _Node(1, token, 1, seq_id, seq_len - 1)
                    leaf.parent = node
                    leaf.endpoints[seq_id] = seq_len
                    node.children[token] = leaf
                    del node.endpoints[seq_id]
                    if node.head_child is None:
                        node.head_child = node.tail_child = leaf
                        leaf.group = _Group(leaf)
                    else:
                        _insert_after(leaf, node.tail_child)
                    active[i] = leaf
            elif node.count == child.count + 1 and node is not root:
                # every other suffix through the node goes on to this child
                if child.length == 1:  # the suffix now covers the child: fuse the node into it
                    child.count += 1
                    child.token = node.token
                    child.length = node.length + 1
                    child.ref_seq = seq_id
                    child.ref_idx = seq_len - child.length
                    child.endpoints[seq_id] = seq_len
                    child.parent = node.parent
                    _replace_in_siblings(node, child)
                    node.parent.children[child.token] = child
                    active[i] = child
                else:  # the node grows by one token into the child
                    node.length += 1
                    node.endpoints[seq_id] += 1
                    node.ref_seq = seq_id
                    node.ref_idx = seq_len - node.length
                    child.length -= 1
                    child.ref_idx += 1
                    child.token = self.seqs[child.ref_seq][child.ref_idx]
                    if child.token != token:
                        del node.children[token]
                        node.children[child.token] = child
            elif child.length == 1:  # move into the child
                del node.endpoints[seq_id]
                child.endpoints[seq_id] = seq_len
                _increment(child)
                active[i] = child
            else:  # split the child after its first token
                mid = _Node(child.count, token, 1, seq_id, seq_len - 1)
                mid.parent = node
                _replace_in_siblings(child, mid)
                node.children[token] = mid
                child.length -= 1
                child.ref_idx += 1
                child.token = self.seqs[child.ref_seq][child.ref_idx]
                mid.children[child.token] = child
                child.parent = mid
                del node.endpoints[seq_id]
                mid.endpoints[seq_id] = seq_len
                mid.head_child = mid.tail_child = child
                child.group = _Group(child)
                _increment(mid)
                active[i] = mid

    def remove(self, seq_id: int) -> None:
        """Drop sequence `seq_id` and every suffix of it (nothing for an id never extended)."""
        seq = self.seqs.get(seq_id, [])
        root = self.root
        for start in range(len(seq)):
            node = root
            node.count -= 1
            idx = start
            path: list[_Node] = []
            while idx < len(seq):
                token = seq[idx]
                child = node.children.get(token)
                if child is None:
                    break
                if child.count > 1:
                    _decrement(child)
                else:  # only this suffix reached it: the whole subtree goes
                    _remove_from_siblings(child)
                    del node.children[token]
                    break
                child.endpoints.pop(seq_id, None)
                idx += child.length
                node = child
                path.append(node)
            if node is not root and len(node.children) == 1:
                child = next(iter(node.children.values()))
                if node.count == child.count:  # nothing ends at the node any more: merge it into its child
                    child.token = node.token
                    child.length += node.length
                    child.ref_idx -= node.length
                    child.parent = node.parent
                    _replace_in_siblings(node, child)
                    path[-1] = node = child
                    node.parent.children[node.token] = node
            # nodes on the path that referenced this sequence take another sequence's copy
            leaf, distance = node, 0
            while leaf.children:
                leaf = next(iter(leaf.children.values()))
                distance += leaf.length
            if not leaf.endpoints or seq_id in leaf.endpoints:
                continue
            ref_seq, ref_idx = next(iter(leaf.endpoints.items()))
            ref_idx -= distance
            while path:
                n = path.pop()
                ref_idx -= n.length
                if n.ref_seq == seq_id:
                    n.ref_seq, n.ref_idx = ref_seq, ref_idx
        self.seqs.pop(seq_id, None)
        self.active.pop(seq_id, None)

    # -- speculation ----------------------------------------------------------------------------
    def _match(self, context: Sequence[int]) -> tuple[Optional[_Node], int]:
        """Where `context` ends in the tree: (node, tokens of the node consumed), or (None, -1)."""
        node, idx, ref, base = self.root, 0, None, 0
        seqs = self.seqs
        for token in context:
            if idx >= node.length:
                node = node.children.get(token)
                if node is None:
                    return None, -1
                ref, base, idx = seqs[node.ref_seq], node.ref_idx, 0
            if ref[base + idx] != token:
                return None, -1
            idx += 1
        return node, idx

    def _matches(self, context: list[int]) -> list[tuple[_Node, int]]:
        """Where each suffix of `context` of length 1 .. len(context) - 1 ends, as far as the tree
        holds them (a suffix that is absent makes every longer one absent too)."""
        n = len(context)
        if len(self.seqs) == 1:
            (seq_id, seq), = self.seqs.items()
            if 0 < n <= len(seq) and seq[-n:] == context:  # the tree's own tail: its active nodes
                active = self.active[seq_id]
                return [(active[-L], active[-L].length) for L in range(1, min(n - 1, len(active)) + 1)]
        found = []
        for L in range(1, n):
            node, idx = self._match(context[n - L:])
            if node is None:
                break
            found.append((node, idx))
        return found

    def speculate(self, context: Sequence[int], max_spec_tokens: int, max_spec_factor: float = 1.0,
                  max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                  use_tree_spec: bool = True) -> SuffixDraft:
        """The best draft over all matched suffixes of `context` (see the module docstring)."""
        context = list(context)
        matches = self._matches(context)
        factor, offset, min_prob = f32(max_spec_factor), f32(max_spec_offset), f32(min_token_prob)
        best: Optional[SuffixDraft] = None
        for L in range(len(matches), 0, -1):
            cap = max(min(max_spec_tokens, int(f32(f32(L * factor) + offset) + 1e-6)), 0)
            if best is not None and cap <= best.score:
                break  # no shorter match can beat it (a tie keeps the longer one)
            node, idx = matches[L - 1]
            if idx >= node.length and node.head_child is None:
                draft = SuffixDraft()  # nothing ever followed this suffix
            elif use_tree_spec:
                draft = self._speculate_tree(node, idx, cap, min_prob)
            else:
                draft = self._speculate_path(node, idx, cap, min_prob)
            if best is None or draft.score > best.score:
                best = draft
                best.match_len = L
        return best if best is not None else SuffixDraft()

    def _speculate_path(self, node: _Node, idx: int, max_tokens: int, min_prob: float) -> SuffixDraft:
        out = SuffixDraft()
        prob, score = 1.0, 0.0
        ref, base = self.seqs[node.ref_seq], node.ref_idx
        while len(out.token_ids) < max_tokens and prob >= min_prob:
            if idx < node.length:
                out.parents.append(len(out.token_ids) - 1)
                out.token_ids.append(ref[base + idx])
                out.probs.append(prob)
                score = f32(score + prob)
                idx += 1
            else:
                child = node.head_child
                if child is None:
                    break
                prob = f32(prob * f32(child.count / node.count))  # the reference's order here: ratio first
                node, idx = child, 0
                ref, base = self.seqs[node.ref_seq], node.ref_idx
        out.score = score
        return out

    def _speculate_tree(self, node: _Node, idx: int, max_tokens: int, min_prob: float) -> SuffixDraft:
        out = SuffixDraft()
        tokens, parents, probs = out.token_ids, out.parents, out.probs
        seqs, score = self.seqs, 0.0
        heap = [(1.0, node, idx, -1)]
        while len(tokens) < max_tokens and heap:
            prob, node, idx, parent = _heap_pop(heap)
            if idx < node.length:
                tokens.append(seqs[node.ref_seq][node.ref_idx + idx])
                parents.append(parent)
                probs.append(prob)
                score = f32(score + prob)
                _heap_push(heap, (prob, node, idx + 1, len(tokens) - 1))
            else:
                child, total = node.head_child, node.count
                while child is not None:
                    p = f32(f32(prob * child.count) / total)
                    if p < min_prob:
                        break
                    _heap_push(heap, (p, child, 0, parent))
                    child = child.next_sibling
        out.score = score
        return out

    # -- checks (tests) -------------------------------------------------------------------------
    def check_integrity(self) -> str:
        """'' when the tree holds exactly the suffixes of its sequences with consistent counts,
        references and sibling order; else what is wrong."""
        stack, visits = [self.root], {}
        while stack:
            node = stack.pop()
            children = list(node.children.values())
            order, child = [], node.head_child
            while child is not None:
                order.append(child)
                child = child.next_sibling
            if {id(c) for c in order} != {id(c) for c in children} or len(order) != len(children):
                return "sibling list and children differ"
            if any(a.count < b.count for a, b in zip(order, order[1:])):
                return "siblings out of order"
            for c in children:
                if c.parent is not node or (node is not self.root and c.count >= node.count):
                    return "parent or count of a child is wrong"
                if node.children.get(c.token) is not c or self.seqs[c.ref_seq][c.ref_idx] != c.token:
                    return "a child's key or reference is wrong"
            stack += children
        for seq_id, seq in self.seqs.items():
            for start in range(len(seq)):
                node, idx = self.root, start
                visits[id(self.root)] = visits.get(id(self.root), 0) + 1
                while idx < len(seq) and idx - start < self.max_depth:
                    node = node.children.get(seq[idx])
                    if node is None or idx + node.length > len(seq):
                        return f"suffix {start} of sequence {seq_id} is missing"
                    ref = self.seqs[node.ref_seq]
                    if ref[node.ref_idx:node.ref_idx + node.length] != seq[idx:idx + node.length]:
                        return f"suffix {start} of sequence {seq_id} disagrees with a reference"
                    visits[id(node)] = visits.get(id(node), 0) + 1
                    idx += node.length
                if seq_id not in node.endpoints:
                    return f"suffix {start} of sequence {seq_id} has no endpoint"
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.count != visits.get(id(node), 0):
                return "a count differs from the suffixes through the node"
            stack += node.children.values()
        return ""
