"""Draft trees grown from the heads' outputs, as pure functions (no engine import): EAGLE-2's
dynamic tree and EAGLE-1's static one from an EAGLE head, Medusa's and Hydra's static trees from
theirs. The head methods turn the result into an engine `Draft(tokens, parents)`; static trees take
their shape from methods/core/tree_shapes.py.

Each returns a `HeadTree`: `tokens[i]` hangs below `parents[i]` (-1 = the root, i.e. the last
accepted token; `parents[i] < i`), `scores[i]` is the node's cumulative draft log-probability.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specbench_cli.methods.core.tree_shapes import static_plan
from specbench_cli.methods.heads.model import EagleHead, HeadKV


@dataclass
class HeadTree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)


def _select(pool: list[tuple[float, int, int, int, int]], budget: int) -> HeadTree:
    """pool rows (score, depth, pool index, parent pool index | -1, token) -> best `budget` nodes,
    ancestor-closed, ordered by (depth, pool index) so parents precede children.

    A child's cumulative log-prob never exceeds its parent's, and ties are broken by depth, so the
    top-`budget` set by (-score, depth) always contains every selected node's parent."""
    ranked = sorted(pool, key=lambda r: (-r[0], r[1], r[2]))[:budget]
    ranked.sort(key=lambda r: (r[1], r[2]))
    where = {r[2]: i for i, r in enumerate(ranked)}
    tree = HeadTree()
    for score, depth, _, parent, token in ranked:
        tree.tokens.append(token)
        tree.parents.append(-1 if parent < 0 else where[parent])
        tree.scores.append(score)
        tree.depths.append(depth)
    return tree


@torch.no_grad()
def eagle2_tree(head: EagleHead, cache: HeadKV, features: torch.Tensor, tokens: torch.Tensor, budget: int,
                depth: int = 5, top_k: int = 10) -> HeadTree:
    """EAGLE-2 dynamic tree (SafeAILab/EAGLE `topK_genrate`).

    features [m, h], tokens [m]: the m pairs not yet in the head's cache (target features of the
    newly accepted positions and the tokens that follow them); the last token is the root. They
    are fed at positions cache.length .. + m - 1 and stay in the cache. Then, for `depth` levels:
    the frontier (top_k nodes of the previous level by cumulative log-prob; the root's top_k
    children at level 1) is fed in one head step (each node sees the committed cache and its own
    ancestors), each frontier node proposes its top_k children, and the best top_k of those k*k
    become the next frontier. Finally every drafted node is reranked by cumulative log-prob and
    the best `budget` (= BC - 1) are kept. The cache is cropped back to the committed pairs.
    Returns a HeadTree of at most `budget` nodes (chain drafts: top_k = 1, depth = budget).
    """
    if budget < 1 or depth < 1 or top_k < 1:
        raise ValueError("budget, depth and top_k must be >= 1")
    base = cache.length
    pos0 = base + tokens.shape[0] - 1  # position of the root pair
    out, logits = head.step(cache, features, tokens,
                            torch.arange(base, pos0 + 1, device=tokens.device))
    committed = cache.length
    logp = torch.log_softmax(logits[-1].float(), -1)
    top = logp.topk(min(top_k, logp.shape[-1]))
    top_ids = head.to_target(top.indices).tolist()  # draft-vocabulary index -> target id
    # pool rows: (score, depth, pool index, parent pool index, token)
    pool = [(top.values[j].item(), 1, j, -1, top_ids[j]) for j in range(len(top_ids))]
    frontier = list(range(len(pool)))          # pool indices to feed next
    parent_state = out[-1:].expand(len(frontier), -1)  # head feature each frontier node's parent produced
    slot: dict[int, int] = {}                  # pool index -> cache slot (offset from `committed`)
    for d in range(2, depth + 1):
        n = len(frontier)
        toks = torch.tensor([pool[i][4] for i in frontier], device=tokens.device)
        mask = torch.zeros(n, cache.length + n, dtype=torch.bool, device=tokens.device)
        mask[:, :committed] = True
        for r, i in enumerate(frontier):
            mask[r, cache.length + r] = True
            a = pool[i][3]
            while a >= 0:  # ancestors already fed
                mask[r, committed + slot[a]] = True
                a = pool[a][3]
        first = cache.length - committed
        pos = torch.full((n,), pos0 + d - 1, device=tokens.device)
        states, lg = head.step(cache, parent_state, toks, pos, mask)
        for r, i in enumerate(frontier):
            slot[i] = first + r
        lp = torch.log_softmax(lg.float(), -1)
        kv = lp.topk(min(top_k, lp.shape[-1]), dim=-1)
        cand = torch.tensor([pool[i][0] for i in frontier])[:, None] + kv.values.cpu()  # [n, k]
        best = cand.flatten().topk(min(top_k, cand.numel())).indices.tolist()
        kid_ids, cand_l = head.to_target(kv.indices).tolist(), cand.tolist()
        children = []
        for r in range(n):
            for j in range(kv.indices.shape[1]):
                pool.append((cand_l[r][j], d, len(pool), frontier[r], kid_ids[r][j]))
                children.append(len(pool) - 1)
        frontier = [children[b] for b in best]
        parent_state = states[[b // kv.indices.shape[1] for b in best]]
    cache.crop(committed)
    return _select(pool, budget)


@torch.no_grad()
def eagle_static_tree(head: EagleHead, cache: HeadKV, features: torch.Tensor, tokens: torch.Tensor,
                      paths: list[list[int]], budget: int) -> HeadTree:
    """EAGLE-1's static tree: `paths` of per-depth ranks (e.g. `eagle1_25`), the first `budget`
    whose parents are kept. The pending pairs are fed as in `eagle2_tree`; then depth by depth
    every kept node that has kept children is fed in one head step (seeing the committed cache
    and its own ancestors), and its children are its top-ranked tokens at the listed ranks.
    The cache is cropped back to the committed pairs."""
    if budget < 1:
        raise ValueError("budget must be >= 1")
    plan = static_plan(paths, budget, max_depth=max((len(p) for p in paths), default=0))
    base = cache.length
    pos0 = base + tokens.shape[0] - 1
    out, logits = head.step(cache, features, tokens, torch.arange(base, pos0 + 1, device=tokens.device))
    committed = cache.length
    max_rank = plan.max_rank
    node: dict[tuple[int, ...], int] = {}
    tree = HeadTree()
    parent_logits = {(): logits[-1]}
    state_of = {(): out[-1]}
    slot: dict[tuple[int, ...], int] = {}
    for d, level in enumerate(plan.levels, start=1):
        tops = {}
        for key in level:  # children of this level's parents, from the parents' logits
            par = key[:-1]
            if par not in tops:
                lp = torch.log_softmax(parent_logits[par].float(), -1)
                top = lp.topk(min(max_rank, lp.shape[-1]))
                tops[par] = (head.to_target(top.indices).tolist(), top.values.tolist())
            ids, vals = tops[par]
            if key[-1] >= len(ids):
                continue
            parent = node.get(par, -1)
            node[key] = len(tree.tokens)
            tree.tokens.append(ids[key[-1]])
            tree.parents.append(parent)
            tree.scores.append(vals[key[-1]] + (tree.scores[parent] if parent >= 0 else 0.0))
            tree.depths.append(d)
        feed = [k for k in level if k in node and k in plan.inner]
        if not feed:
            continue
        n = len(feed)
        mask = torch.zeros(n, cache.length + n, dtype=torch.bool, device=tokens.device)
        mask[:, :committed] = True
        for r, key in enumerate(feed):
            mask[r, cache.length + r] = True
            for j in range(1, len(key)):
                mask[r, committed + slot[key[:j]]] = True
        first = cache.length - committed
        toks = torch.tensor([tree.tokens[node[k]] for k in feed], device=tokens.device)
        states, lg = head.step(cache, torch.stack([state_of[k[:-1]] for k in feed]), toks,
                               torch.full((n,), pos0 + d, device=tokens.device), mask)
        for r, key in enumerate(feed):
            slot[key], state_of[key], parent_logits[key] = first + r, states[r], lg[r]
    cache.crop(committed)
    return tree


def medusa_tree(logits: torch.Tensor, paths: list[list[int]], budget: int,
                ids: torch.Tensor | None = None) -> HeadTree:
    """Static Medusa tree: logits [H, V] of the heads at the last accepted position; `paths` lists
    per-depth top-k ranks (Medusa's `medusa_choices`, best first). The first paths whose prefixes
    are all kept are taken until `budget` nodes; a path deeper than H is skipped. With a draft
    vocabulary the logits are [H, V'] and `ids` [V'] maps their indices to target ids."""
    if budget < 1:
        raise ValueError("budget must be >= 1")
    logp = torch.log_softmax(logits.float(), -1)
    max_rank = 1 + max((r for p in paths for r in p), default=0)
    top = logp.topk(min(max_rank, logp.shape[-1]), dim=-1)
    tok = (top.indices if ids is None else ids[top.indices.to(ids.device)]).tolist()
    val = top.values.tolist()
    node_of: dict[tuple[int, ...], int] = {}
    tree = HeadTree()
    for path in paths:
        key = tuple(path)
        if len(tree.tokens) >= budget:
            break
        if not key or len(key) > logits.shape[0] or key in node_of or (len(key) > 1 and key[:-1] not in node_of):
            continue
        d, r = len(key) - 1, key[-1]
        if r >= len(tok[d]):
            continue
        parent = node_of.get(key[:-1], -1)
        node_of[key] = len(tree.tokens)
        tree.tokens.append(tok[d][r])
        tree.parents.append(parent)
        tree.scores.append(val[d][r] + (tree.scores[parent] if parent >= 0 else 0.0))
        tree.depths.append(d + 1)
    return tree


@torch.no_grad()
def hydra_tree(head, base: torch.Tensor, root: int, paths: list[list[int]], budget: int) -> HeadTree:
    """Hydra's static tree: node (r_1, ..., r_d) is the r_d-th best token of head d - 1 given the
    base state and the embeddings of the root and of the node's ancestors (the heads are
    sequentially dependent, so every parent with kept children gets its own head call; one batched
    call per depth). `paths` as in `medusa_tree` (e.g. `mc_sim_7b_63`, Hydra's default)."""
    if budget < 1:
        raise ValueError("budget must be >= 1")
    plan = static_plan(paths, budget, head.n_heads)
    device = base.device
    root_emb = head.embed_tokens(torch.tensor([root], device=device))[0]
    tree = HeadTree()
    node: dict[tuple[int, ...], int] = {}
    embs: dict[tuple[int, ...], torch.Tensor] = {(): root_emb}  # path -> cat(emb(root), emb(ancestors..., self))
    for d, level in enumerate(plan.groups, start=1):
        level = [(par, children) for par, children in level if d == 1 or par in node]
        if not level:
            break
        parents = [par for par, _ in level]
        logits = head.head_logits(d - 1, base.expand(len(parents), -1), torch.stack([embs[p] for p in parents]))
        logp = torch.log_softmax(logits.float(), -1)
        top = logp.topk(min(plan.max_rank, logp.shape[-1]), dim=-1)
        ids, vals = head.to_target(top.indices).tolist(), top.values.tolist()
        inner: list[tuple[int, ...]] = []
        for r, (par, children) in enumerate(level):
            for key in children:
                if key[-1] >= len(ids[r]):
                    continue
                parent = node.get(par, -1)
                node[key] = len(tree.tokens)
                tree.tokens.append(ids[r][key[-1]])
                tree.parents.append(parent)
                tree.scores.append(vals[r][key[-1]] + (tree.scores[parent] if parent >= 0 else 0.0))
                tree.depths.append(d)
                if key in plan.inner:
                    inner.append(key)
        if inner:  # the next level's inputs: one embedding call for the level
            toks = head.embed_tokens(torch.tensor([tree.tokens[node[k]] for k in inner], device=device))
            for key, tok in zip(inner, toks):
                embs[key] = torch.cat([embs[key[:-1]], tok])
    return tree
