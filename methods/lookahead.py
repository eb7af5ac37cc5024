"""Lookahead decoding (Fu et al., 2024): Jacobi trajectories feed an n-gram pool; pool n-grams
that start with the root are verified, all in one forward.

One step's draft is one tree with two parts, the target forward runs both at once:

lookahead branch (never accepted: `acceptable=False`, so never kept in the KV cache)
    A window of W columns and N-1 levels. Level `l`, column `j` holds the current guess for
    position `root + j + l` after `l` Jacobi iterations along its diagonal; level 0, column 0
    is the root itself. As parent indices:
        level 0:        root -> (0,1) -> (0,2) -> ... -> (0,W-1)     (a chain)
        level l >= 1:   (l,j) hangs below (l-1,j)  ((0,0) = the root)
    so token (l,j) attends to the cached prefix, the root, level-0 tokens of columns 1..j and
    the tokens of its own column at levels 1..l-1, at position past + j + l (its depth).
    The reference implementation (hao-ai-lab/LookaheadDecoding) uses a hand-built mask in
    which (l,j) sees its column at every lower level plus a causal prefix of level l-1
    (level 0 for l = 1). For N = 3 (the default up to BC 19) the two are identical: level 1
    sees level 0 up to its column and itself. For deeper levels a tree cannot express "the
    prefix of level l-1 plus my column" (that is a DAG), so here the prefix comes from level
    0 instead: each window token sees the oldest iterate of the positions before its column
    and the newest iterates of its own column. Positions are the same as in the reference.

verification branch (acceptable)
    Up to G n-grams from the pool whose first token is the root, minus that first token, as
    branches from the root, merged into a trie (shared prefixes are verified once, which
    saves budget; candidates are added most recent first while the budget lasts, the last
    one possibly truncated).

After the forward (in `observe`, no extra forward):
    - n-grams along the window's diagonals go into the pool: for column j, key (0,j) and
      tuple ((1,j), ..., (N-2,j), prediction at (N-2,j)): N tokens at consecutive positions;
    - the window moves one Jacobi iteration: level l <- level l+1 (level 0 drops column 0,
      which the new root replaces), top level <- the predictions at the old top level;
    - `shift="accepted"` further drops the columns the accepted tokens overtook and fills the
      tail with prompt tokens (positions stay aligned); `shift="one"` (default) does not, as
      the reference's ALWAYS_FWD_ONE=1, the only mode of its greedy search.

The pool maps a first token to at most `pool_cap` tuples in LRU order (a re-inserted tuple
becomes the most recent; a full key evicts its least recent). It is optionally seeded with
the prompt's n-grams and kept up to date with the n-grams of the accepted text (the
reference does both when POOL_FROM_PROMPT is set).

Budget: the forward processes root + (N-1)W - 1 window nodes + at most G(N-1) candidate
nodes = (N-1)(W+G) tokens (the root doubles as column 0 of level 0). Defaults from BC:
N = 2 below 6, 3 below 20, 4 below 40, else 5; W + G = BC // (N-1) split W = ceil, G = floor
half. E.g. BC 10 -> N=3, W=3, G=2 (10 tokens); 30 -> N=4, W=5, G=5 (30); 60 -> N=5, W=8,
G=7 (60). At BC 2 the window is empty (W=1, N=2): pure pool verification of one token.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import islice
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

SHIFT_MODES = ("one", "accepted")


def default_config(budget: int) -> tuple[int, int, int]:
    """(W, N, G) for a block complexity: the largest window and guess set with (N-1)(W+G) <= budget."""
    if budget < 2:
        return 0, 2, 0
    n = 2 if budget < 6 else 3 if budget < 20 else 4 if budget < 40 else 5
    width = budget // (n - 1)
    w = (width + 1) // 2
    return w, n, width - w


def step_cost(w: int, n: int, g: int) -> int:
    """Tokens one forward processes at most: root + window nodes + candidate nodes."""
    return 1 + max((n - 1) * w - 1, 0) + g * (n - 1)


class NgramPool:
    """First token -> up to `cap` continuations (tuples of N-1 tokens), least recent first."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.table: dict[int, dict[tuple[int, ...], None]] = {}

    def add(self, key: int, cont: tuple[int, ...]) -> None:
        entry = self.table.get(key)
        if entry is None:
            self.table[key] = {cont: None}
            return
        if cont in entry:
            del entry[cont]  # re-insert as the most recent
        elif len(entry) >= self.cap:
            del entry[next(iter(entry))]
        entry[cont] = None

    def add_sequence(self, ids: list[int], n: int, start: int = 0) -> None:
        """Every n-gram of `ids` whose first token is at index >= start."""
        for i in range(start, len(ids) - n + 1):
            self.add(ids[i], tuple(ids[i + 1:i + n]))

    def recent(self, key: int, g: int) -> list[tuple[int, ...]]:
        entry = self.table.get(key)
        return list(islice(reversed(entry), g)) if entry else []

    def __len__(self) -> int:
        return sum(len(e) for e in self.table.values())


def window_parents(w: int, n: int) -> tuple[list[int], list[list[int]]]:
    """Parents of the window's nodes and `index[l][j]` = node of (level l, column j) (-1 = root).

    Nodes are level-major: level 0 columns 1..W-1, then level 1 columns 0..W-1, and so on,
    so every parent precedes its child.
    """
    if w == 0:
        return [], [[] for _ in range(max(n - 1, 0))]
    parents: list[int] = []
    index: list[list[int]] = []
    for level in range(n - 1):
        row = []
        for col in range(w):
            if level == 0 and col == 0:
                row.append(-1)
                continue
            parents.append(row[col - 1] if level == 0 else index[level - 1][col])
            row.append(len(parents) - 1)
        index.append(row)
    return parents, index


def build_trie(candidates: list[tuple[int, ...]], room: int, base: int) -> tuple[list[int], list[int]]:
    """Candidates as branches from the root, shared prefixes merged, at most `room` nodes.

    Node ids start at `base` (after the window's nodes). Returns (tokens, parents)."""
    tokens: list[int] = []
    parents: list[int] = []
    seen: dict[tuple[int, int], int] = {}
    for cand in candidates:
        parent = -1
        for tok in cand:
            node = seen.get((parent, tok))
            if node is None:
                if len(tokens) >= room:
                    break
                node = base + len(tokens)
                tokens.append(tok)
                parents.append(parent)
                seen[(parent, tok)] = node
            parent = node
        if len(tokens) >= room:
            break
    return tokens, parents


@dataclass
class LookaheadOptions:
    W: Optional[int] = opt(None, lo=0, hi=MAX_BUDGET)  # window columns (root column included); 0: no lookahead branch
    N: Optional[int] = opt(None, lo=2, hi=64)  # n-gram size (the window has N-1 levels)
    G: Optional[int] = opt(None, lo=0, hi=MAX_BUDGET)  # verification n-grams per step
    pool_cap: Optional[int] = opt(None, lo=1, hi=100_000)  # n-grams kept per first token; None: max(G, 8)
    pool_from_prompt: bool = True    # seed the pool with the prompt's n-grams
    pool_from_output: bool = True    # add the accepted text's n-grams as it grows
    shift: str = opt("one", choices=SHIFT_MODES)  # one | accepted: how the window follows accepted tokens


class Lookahead(Method):
    name = "lookahead"
    summary = "lookahead decoding: Jacobi window fills an n-gram pool; pool n-grams verified as a trie"
    structure = Structure.TREE
    Options = LookaheadOptions

    def plan(self) -> None:
        o = self.opts
        budget = self.ctx.budget
        dw, dn, dg = default_config(budget)
        n = dn if o.N is None else o.N
        if o.N is not None and o.W is None and o.G is None:
            width = max(budget // (n - 1), 0)
            dw, dg = (width + 1) // 2, width // 2
        w = dw if o.W is None else o.W
        g = dg if o.G is None else o.G
        window_nodes = max((n - 1) * w - 1, 0)
        if 1 + window_nodes > budget:
            raise UsageError(f"lookahead window W={w}, N={n} needs {1 + window_nodes} tokens per step, "
                             f"more than block complexity {budget}")
        self.W, self.N, self.G = w, n, g
        self.cap = max(g, 8) if o.pool_cap is None else o.pool_cap
        self.parents_w, self.index = window_parents(w, n)
        self.n_window = len(self.parents_w)
        self.room = budget - 1 - self.n_window  # nodes left for verification n-grams
        self.flags_w = [False] * self.n_window
        # (level, column) of each window node, in node order, to flatten the window quickly
        self.cells = [(l, j) for l in range(n - 1) for j in range(w) if (l, j) != (0, 0)] if w else []
        # node row (in the logits) of each top-level column: where the new trajectory tokens come from
        top = n - 2
        self.top_rows = [self.index[top][j] + 1 for j in range(w)] if w else []
        self.rng = random.Random(self.ctx.seed)

    def params(self) -> dict:
        return {"structure": self.structure.value, "W": self.W, "N": self.N, "G": self.G, "pool_cap": self.cap,
                "pool_from_prompt": self.opts.pool_from_prompt, "pool_from_output": self.opts.pool_from_output,
                "shift": self.opts.shift, "tokens_per_step": step_cost(self.W, self.N, self.G)}

    # -- state ----------------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.rng = random.Random(self.ctx.seed)
        self.prompt = list(prompt_ids) or [0]
        self.pool = NgramPool(self.cap)
        if self.opts.pool_from_prompt:
            self.pool.add_sequence(self.prompt, self.N)
        # n-grams of the text starting before this index are in the pool already
        self.text_done = max(len(self.prompt) - self.N + 1, 0) if self.opts.pool_from_prompt else len(self.prompt)
        # One guess per position root+1 .. root+W+N-2; every level starts from the same guesses
        # (iteration 0), (l, j) at position root + j + l -> guess[j + l - 1].
        guess = self._fill(self.W + self.N - 2)
        self.levels = [[0] + guess[0:self.W - 1]] + [guess[l - 1:l - 1 + self.W] for l in range(1, self.N - 1)]
        # the first N-2 steps only mix the random start into the window: no n-grams from them
        self.warmup = self.N - 2

    def _fill(self, n: int) -> list[int]:
        choice, src = self.rng.choice, self.prompt
        return [choice(src) for _ in range(n)]

    # -- drafter contract -------------------------------------------------------------------
    def propose(self, state: DecodeState) -> Draft:
        ids = state.ids
        self.root = ids[-1]
        if self.opts.pool_from_output:
            self.pool.add_sequence(ids, self.N, self.text_done)
            self.text_done = max(len(ids) - self.N + 1, self.text_done)
        levels = self.levels
        tokens = [levels[l][j] for l, j in self.cells]
        cands = self.pool.recent(ids[-1], self.G) if self.G and self.room > 0 else []
        if not cands:
            return Draft(tokens=tokens, parents=self.parents_w, acceptable=self.flags_w if tokens else None)
        t_tokens, t_parents = build_trie(cands, self.room, self.n_window)
        return Draft(tokens=tokens + t_tokens, parents=self.parents_w + t_parents,
                     acceptable=self.flags_w + [True] * len(t_tokens))

    def observe(self, result: VerifyResult) -> None:
        if not self.W:
            return
        preds = result.preds
        if preds is None:  # sampling: the trajectory still follows the target's argmax
            preds = result.logits.argmax(dim=-1).tolist()
        levels = self.levels
        new = [preds[r] for r in self.top_rows]
        if self.warmup:
            self.warmup -= 1
        else:
            add = self.pool.add
            root = self.root
            top = self.N - 2
            for j in range(self.W):
                key = root if j == 0 else levels[0][j]
                add(key, tuple(levels[l][j] for l in range(1, top + 1)) + (new[j],))
        # one Jacobi iteration: every level moves down, the predictions become the top level
        moved = levels[1:] + [new]
        skip = len(result.accepted)
        if skip and self.opts.shift == "accepted":
            # the root moved skip+1 positions, not 1: drop the overtaken columns, fill the tail
            moved = [lvl[skip:] + self._fill(min(skip, self.W)) for lvl in moved]
        moved[0] = [0] + moved[0][1:]  # column 0 of level 0 is the (new) root
        self.levels = moved
