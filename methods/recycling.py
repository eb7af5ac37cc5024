"""Token Recycling (Luo et al. 2024, "Turning Trash into Treasure"): reuse the candidate tokens
every verification forward computes anyway.

An adjacency matrix `M [V, k]` holds, for each token, the k tokens the target ranked highest
after it the last time that token went through a forward. After every verification, each row
of the verified block (the root and every draft node) refreshes the row of its own token with
the top-k of its logits: no extra forward, no draft model, no datastore. To draft, the static
tree template is walked from the root: a node at rank path (r1, ..., rd) holds the rd-th entry
of its parent token's row. Rows never filled yet leave their subtree out. The target verifies
the tree, so the output is AR's (lossless).

The template is the paper's 80-node tree (8 children at the root, fewer deeper, depth 6),
kept here as children counts per parent path. The block complexity caps the tree at BC - 1
nodes; the paper is silent on how, and two orders are offered (docs/methods/recycling.md):
`prior` (default) keeps the nodes with the highest product of a per-rank acceptance prior, so a
small budget buys a deeper, narrower tree; `bfs` keeps the template's own order (all of the
root's 8 children first). Both keep every node's parent. The matrix persists across the
questions of a pass (the paper's "hot start"; emptied when a pass starts: `forget`);
`-o recycling.hot=false` clears it per prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.lazy import torch
from specbench_cli.methods.core.method import Method
from specbench_cli.options import opt

# The paper's template as children per parent rank path: (parent path) -> number of children.
TEMPLATE_CHILDREN: dict[tuple[int, ...], int] = {
    (): 8,
    (0,): 8, (1,): 4, (2,): 3, (3,): 2, (4,): 1, (5,): 1, (6,): 1, (7,): 1,
    (0, 0): 8, (0, 1): 3, (0, 2): 2, (0, 3): 1, (0, 4): 1, (0, 5): 1, (0, 6): 1, (0, 7): 1,
    (1, 0): 2, (1, 1): 1, (2, 0): 1, (3, 0): 1, (4, 0): 1, (5, 0): 1,
    (0, 0, 0): 5, (0, 0, 1): 2, (0, 0, 2): 1, (0, 0, 3): 1, (0, 0, 4): 1, (0, 1, 0): 1, (0, 2, 0): 1,
    (1, 0, 0): 1, (2, 0, 0): 1, (3, 0, 0): 1,
    (0, 0, 0, 0): 3, (0, 0, 0, 1): 1, (0, 0, 0, 2): 1, (0, 0, 1, 0): 1, (0, 1, 0, 0): 1, (1, 0, 0, 0): 1,
    (0, 0, 0, 0, 0): 2, (0, 0, 0, 1, 0): 1,
}
# Prior probability that the rank-r candidate is the target's next token (a choice: the top
# candidate of a refreshed row is right about half the time on chat text, the rest decays).
RANK_PRIOR = (0.5, 0.15, 0.08, 0.05, 0.04, 0.03, 0.025, 0.02)
ORDERS = ("prior", "bfs")


def template_paths(children: dict[tuple[int, ...], int]) -> list[tuple[int, ...]]:
    """Every node's rank path, depth by depth, parents in order, ranks ascending."""
    paths, frontier = [], [()]
    while frontier:
        nxt = []
        for parent in frontier:
            for r in range(children.get(parent, 0)):
                nxt.append(parent + (r,))
        paths += nxt
        frontier = nxt
    return paths


def truncate(paths: list[tuple[int, ...]], n: int, order: str) -> list[tuple[int, ...]]:
    """At most `n` paths, every kept path's parent kept too, in an order where parents come first."""
    if order == "bfs":
        return paths[:n]

    def score(p: tuple[int, ...]) -> float:
        s = 1.0
        for r in p:
            s *= RANK_PRIOR[r] if r < len(RANK_PRIOR) else RANK_PRIOR[-1] / (r - len(RANK_PRIOR) + 2)
        return s
    # a child's score never exceeds its parent's (every factor is < 1), and ties keep the BFS
    # order, where parents precede children: the kept set is closed under taking parents
    kept = set(sorted(range(len(paths)), key=lambda i: (-score(paths[i]), i))[:n])
    return [p for i, p in enumerate(paths) if i in kept]


def read_tree_file(path: str) -> list[tuple[int, ...]]:
    """A JSON list of rank paths (Medusa / Token Recycling style: [[0], [1], [0, 0], ...]), or a
    named static tree (methods/core/tree_shapes.py), in breadth-first order."""
    from specbench_cli.methods.core.tree_shapes import read_paths

    return sorted({tuple(x) for x in read_paths(path, "recycling.tree")}, key=lambda x: (len(x), x))


@dataclass
class RecyclingOptions:
    k: int = opt(8, lo=1, hi=64)  # candidates kept per token (the matrix's width)
    tree: Optional[str] = None    # a JSON file of rank paths instead of the paper's template
    order: str = opt("prior", choices=ORDERS)  # how BC - 1 nodes are chosen from the template: prior | bfs
    hot: bool = True              # keep the matrix across prompts (the paper's hot start)


class TokenRecycling(Method):
    name = "recycling"
    summary = "Token Recycling: top-k successors of every verified token in a matrix, drafted as a static tree"
    structure = Structure.TREE
    adaptive_budget = True  # plain drafts; observe reads result.draft
    Options = RecyclingOptions

    def plan(self) -> None:
        o = self.opts
        paths = read_tree_file(o.tree) if o.tree else template_paths(TEMPLATE_CHILDREN)
        too_wide = [p for p in paths if max(p) >= o.k]
        if too_wide:
            raise UsageError(f"recycling: the tree uses rank {max(max(p) for p in paths)} but recycling.k = {o.k} "
                             f"keeps ranks 0..{o.k - 1}")
        self.paths = truncate(paths, max(0, self.ctx.budget - 1), o.order)
        index = {p: i for i, p in enumerate(self.paths)}
        self.parent = [index[p[:-1]] if len(p) > 1 else -1 for p in self.paths]
        self.matrix = None
        self.host_topk = o.k  # the loop hands every verified row's top-k over as host lists

    def params(self) -> dict:
        return {"k": self.opts.k, "tree": self.opts.tree or "paper-80", "order": self.opts.order,
                "hot": self.opts.hot, "nodes": len(self.paths)}

    def _new_matrix(self) -> None:
        vocab = self.ctx.target.vocab_size
        self.matrix = torch.full((vocab, self.opts.k), -1, dtype=torch.int32)  # on the CPU: read per node

    def reset(self, prompt_ids: list[int]) -> None:
        if self.matrix is None or not self.opts.hot:
            self._new_matrix()

    def forget(self) -> None:
        """A new pass (after the warm-up, each `--repeats` pass): an empty matrix, so no pass drafts
        from rows an earlier pass (or the warm-up) learned on the same questions."""
        self.matrix = None

    def propose(self, state: DecodeState) -> Draft:
        if not self.paths or state.remaining <= 1:
            return Draft()
        rows: dict[int, list[int]] = {}
        tokens: list[int] = []
        parents: list[int] = []
        signal: list[int] = []
        slot = [-1] * len(self.paths)  # node index in the draft, -1 when left out
        for i, path in enumerate(self.paths):
            p = self.parent[i]
            if p >= 0 and slot[p] < 0:
                continue  # its parent was left out
            parent_token = state.ids[-1] if p < 0 else tokens[slot[p]]
            row = rows.get(parent_token)
            if row is None:
                row = rows[parent_token] = self.matrix[parent_token].tolist()
            token = row[path[-1]]
            if token < 0:
                continue  # never seen this token's successors yet
            slot[i] = len(tokens)
            tokens.append(token)
            parents.append(-1 if p < 0 else slot[p])
            signal.append(1 + path[-1])  # for an adaptive budget: the candidate's rank among the recycled
        return Draft(tokens=tokens, parents=parents, signal=signal)

    def scores(self, draft: Draft) -> list[float]:
        """Each node's estimated chance of acceptance (its whole path): the product of the rank
        prior along it (for merging this tree with another drafter's: methods/core/merge.py)."""
        from specbench_cli.methods.core.merge import path_scores

        last = len(RANK_PRIOR) - 1
        return path_scores(draft, lambda i: RANK_PRIOR[min(draft.signal[i] - 1, last)])

    def observe(self, result: VerifyResult) -> None:
        # the engine's sequence already holds this step's new tokens: the root sits before them
        root = result.state.ids[-1 - len(result.new_tokens)]
        verified = [root] + list(result.draft.tokens)
        k = self.opts.k
        if result.top is not None and all(len(row) == k for row in result.top):  # the loop's host copy
            top = torch.tensor(result.top, dtype=torch.int32)
        else:  # [n+1, k]
            top = result.logits.topk(k, dim=-1).indices.to("cpu", torch.int32)
        self.matrix[torch.tensor(verified, dtype=torch.long)] = top
