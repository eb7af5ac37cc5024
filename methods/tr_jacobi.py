"""TR-Jacobi (tree-retrieval Jacobi), the training-free decoder of "Make Some Noise" (MSN).

Every step verifies one sparse token tree built from a fixed *template* (data: a list of
paths, Medusa-style), whose node tokens are filled from a candidate table:

- Jacobi nodes: a template path `(k1, k2, ...)` means "rank k1 at depth 1, rank k2 at
  depth 2, ...". The rank-k candidate at depth d is the k-th most likely token of the
  previous verify pass at the d-th *unaccepted* position below the accepted path (the
  Jacobi iteration: those positions were computed on a wrong prefix and are refined by
  re-feeding them). Candidates depend on the depth only, not on the parent, as in MSN.
- one retrieval path `R, R, ...` hanging from the root: the tokens that followed the most
  recent earlier occurrence of the longest matching context suffix (up to 3 tokens,
  `NgramIndex` from `pld`), at most `retrieval_len` (5) tokens.
- "ahead noise": any slot without a candidate (first step, a depth beyond the last
  forward's unaccepted positions, a short or missing retrieval) gets a token drawn
  uniformly from the context (prompt + generated), with a fixed seed.

After verification the greedy verifier's longest accepted path wins; the continuation of
that path through the rejected nodes (at each level the child the target scored highest at
its parent's row; every node's score is gathered on the device by `host_values` and comes to
the host in the loop's one transfer) supplies the next table's rows, from the rows' top-k the
loop brings to the host too.

The template is derived from the block complexity BC once, in `plan`: `r` retrieval
nodes (`min(5, max(1, (BC-1)//2))`) and the `BC-1-r` Jacobi paths of highest prior value,
where a path's value is the product over its ranks of `q_k = 0.5 (k+1)^-1.3` (a prior for
"rank k of a Jacobi row is right"; MSN's hand-written template follows the same shape),
with ranks below `top_k` (10) and Jacobi depth at most `max_depth` (4). See
docs/methods/tr-jacobi.md for the templates at BC 10, 30 and 60.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from specbench_cli.decoding.draft import Draft, children_lists, paths_to_parents
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.lazy import torch
from specbench_cli.methods.core.method import Method
from specbench_cli.methods.pld import NgramIndex
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

RETRIEVAL = -1  # the choice index that marks the retrieval path in a template path


@dataclass
class TRJacobiOptions:
    top_k: int = opt(10, lo=1, hi=4096)  # candidates kept per Jacobi row (MSN: 10)
    max_depth: int = opt(4, lo=1, hi=64)  # deepest Jacobi node (MSN template: 4)
    retrieval_len: Optional[int] = opt(None, lo=0, hi=MAX_BUDGET)  # None: min(5, max(1, (BC-1)//2)); 0 disables retrieval
    max_ngram: int = opt(3, lo=1, hi=64)  # longest suffix matched for the retrieval path (MSN: 3)
    seed: int = 0                         # ahead-noise sampling


def rank_prior(k: int) -> float:
    """Prior probability that rank `k` (0-based) of a Jacobi row is the right token."""
    return 0.5 * (k + 1) ** -1.3


@lru_cache(maxsize=256)
def jacobi_paths(n: int, top_k: int, max_depth: int) -> tuple[tuple[int, ...], ...]:
    """The `n` rank paths of highest prior value, best first; prefix-closed by construction.

    Best-first enumeration: a popped path offers its first child `(…, 0)` and its next
    sibling `(…, k+1)`; each is worth less than the path itself, so popping in value order
    yields the top-n nodes and every prefix before its extensions.
    """
    out: list[tuple[int, ...]] = []
    if n <= 0 or top_k <= 0 or max_depth <= 0:
        return ()
    heap = [(-rank_prior(0), (0,))]
    while heap and len(out) < n:
        neg, path = heapq.heappop(heap)
        out.append(path)
        value = -neg
        if len(path) < max_depth:
            heapq.heappush(heap, (-(value * rank_prior(0)), path + (0,)))
        k = path[-1]
        if k + 1 < top_k:
            sibling = value / rank_prior(k) * rank_prior(k + 1)
            heapq.heappush(heap, (-sibling, path[:-1] + (k + 1,)))
    return tuple(out)


def retrieval_length(budget: int, requested: Optional[int]) -> int:
    slots = budget - 1
    if slots <= 0:
        return 0
    r = min(5, max(1, slots // 2)) if requested is None else requested
    return max(0, min(r, slots))


def template(budget: int, top_k: int = 10, max_depth: int = 4,
             retrieval_len: Optional[int] = None) -> list[list[int]]:
    """Template paths for block complexity `budget`: `budget - 1` nodes at most.

    A path is a list of choice indices: a rank `k >= 0` (Jacobi row at that depth) or
    `RETRIEVAL` (-1; the retrieval path is `[-1]`, `[-1, -1]`, ...).
    """
    r = retrieval_length(budget, retrieval_len)
    n_jacobi = max(0, budget - 1 - r)
    paths = [[RETRIEVAL] * d for d in range(1, r + 1)]
    paths += [list(p) for p in jacobi_paths(n_jacobi, top_k, max_depth)]
    return paths


class TRJacobi(Method):
    name = "tr-jacobi"
    summary = "TR-Jacobi (Make Some Noise): Jacobi top-K token tree + one prompt-lookup path + context noise"
    structure = Structure.TREE
    Options = TRJacobiOptions

    def plan(self) -> None:
        o = self.opts
        self.paths = template(self.ctx.budget, o.top_k, o.max_depth, o.retrieval_len)
        parents, keys = paths_to_parents(self.paths) if self.paths else ([], [])
        self.parents: list[int] = parents
        # per node: (depth - 1, choice) with choice = rank or RETRIEVAL
        self.slots: list[tuple[int, int]] = [(len(key) - 1, key[-1]) for key in keys]
        self.children = children_lists(parents)
        self.retrieval_len = sum(1 for key in keys if key[-1] == RETRIEVAL)
        self.depth = max((len(k) for k in keys), default=0)
        self.k_needed = 1 + max((c for _, c in self.slots if c >= 0), default=-1)
        # the loop hands every verified row's top-k over as host lists (`observe` reads no logits)
        self.host_topk = max(self.k_needed, 1) if self.parents else 0
        # per node: its parent's row in the verified logits (the root's row is 0)
        self.parent_rows = [p + 1 for p in parents]
        self._index: dict = {}   # device -> the parent rows as an index tensor there
        self._tokens: list[int] = []

    def params(self) -> dict:
        o = self.opts
        return {"structure": self.structure.value, "top_k": o.top_k, "max_depth": o.max_depth,
                "retrieval_len": self.retrieval_len, "max_ngram": o.max_ngram, "tree_nodes": len(self.parents),
                "seed": o.seed}

    def label(self) -> str:
        return "tr-jacobi"

    # -- drafter contract ---------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.index = NgramIndex(1, self.opts.max_ngram)
        self.rng = random.Random(self.opts.seed)
        self.table: list[list[int]] = []   # table[d][k]: rank-k Jacobi candidate at depth d+1

    def propose(self, state: DecodeState) -> Draft:
        if not self.parents:
            return Draft()
        ids = state.ids
        retrieval: list[int] = []
        if self.retrieval_len:
            self.index.update(ids)
            retrieval = self.index.lookup(ids, self.retrieval_len)
        table = self.table
        noise = self.rng.choices(ids, k=len(self.slots))
        tokens = []
        for i, (d, c) in enumerate(self.slots):
            if c == RETRIEVAL:
                tokens.append(retrieval[d] if d < len(retrieval) else noise[i])
            elif d < len(table) and c < len(table[d]):
                tokens.append(table[d][c])
            else:
                tokens.append(noise[i])
        self._tokens = tokens
        return Draft(tokens=tokens, parents=self.parents)

    def host_values(self, logits: "torch.Tensor") -> Optional["torch.Tensor"]:
        """Every node's score at its parent's row: read in `observe` to pick the continuation
        below the accepted path (computed with the forward, brought over in the loop's one transfer)."""
        if not self.parents or logits.shape[0] != len(self.parents) + 1:
            return None
        return self._scores(logits, self._tokens)

    def _scores(self, logits: "torch.Tensor", tokens: list[int]) -> "torch.Tensor":
        """`logits[parent + 1, token]` for every node: one gather on the logits' device."""
        rows = self._index.get(logits.device)
        if rows is None:
            rows = self._index[logits.device] = torch.tensor(self.parent_rows, dtype=torch.long,
                                                             device=logits.device)
        return logits[rows, torch.tensor(tokens, dtype=torch.long).to(logits.device, non_blocking=True)]

    def observe(self, result: VerifyResult) -> None:
        if not self.parents:
            return
        k = min(self.k_needed, result.logits.shape[-1])
        top = result.top if result.top is not None and all(len(t) >= k for t in result.top) else None
        if top is None:  # a result made by hand (no loop): the same top-k, read here
            top = result.logits.topk(max(k, 1), dim=-1).indices.tolist()
        scores = result.values
        if scores is None or len(scores) != len(self.parents):  # a result made by hand (no loop)
            scores = self._scores(result.logits, result.draft.tokens).double().tolist()
        # Continue below the accepted path through rejected nodes: at each level the child the
        # target scored highest at its parent's row (the most plausible wrong guess; the first
        # such child on a tie).
        rows: list[int] = []
        row = result.accepted[-1] + 1 if result.accepted else 0
        while len(rows) < self.depth:
            kids = self.children[row]
            if not kids:
                break
            child = kids[0] if len(kids) == 1 else max(kids, key=lambda c: (scores[c], -c))
            row = child + 1
            rows.append(row)
        if not rows or self.k_needed == 0:
            self.table = []
            return
        self.table = [top[r][:k] for r in rows]
