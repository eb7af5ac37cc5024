"""Mask probing: training-free multi-token prediction by mask tokens synthesised in embedding
space ("Efficient Training-Free Multi-Token Prediction via Embedding-Space Probing", Goel,
Gagrani, Lee, Lott 2026). No public code exists; this follows the paper's description, and
each choice it leaves open is recorded here and in docs/methods/mask-probe.md.

One step verifies `[root] + draft tree + mask chain(s)` in one forward:

- Mask chain(s): `S` input-only nodes (acceptable=False, `Draft.embeds`) hanging from the
  ROOT as a chain. Mask j (1..S) sits at position root+j and its logits guess the token at
  root+j+1. With `masks_per_step = 2` there are two sibling chains with different
  embeddings; a future step's distribution is the mean of the two masks' softmaxes at that
  depth (two probes of the same position).

  Why under the root (design question): the masks must predict the positions after the
  step's accepted path, unknown before verification. Under the root they are conditioned on
  verified context only, so their guesses are never poisoned by a rejected draft token; the
  cost is a known shift: after `a` accepted nodes + the bonus, the next root is root+a+1 and
  the next tree's depth d is mask `a + d`'s guess. Masks below the most probable leaf would
  be exact only when that whole path is accepted and conditioned on a wrong token otherwise
  (the common case at these acceptance rates).
- Draft tree: built from the previous step's mask guesses (shifted by the accepted length):
  per depth the top-K candidates and their probabilities; the `BC - 1 - masks` nodes of
  highest cumulative probability (product along the path) are kept, enumerated best-first
  with top-1 expansion (a popped node offers its best child and its next sibling).
  Pruning: a child whose token repeats its parent's token (for depth 1: the root, the last
  accepted token) is replaced by the next best candidate of that depth.
- Mask embeddings (`init`):
  "last":     the embeddings of the last S prompt tokens (chain 2: the S before them);
  "gaussian": drawn once from N(mean_d, std_d) of the embedding table, per dimension, with
              a fixed seed (chain 2: an independent draw);
  "mean":     the mean of the prompt's embeddings, then an exponential moving average over
              accepted tokens, `m <- (1 - ema) m + ema e(token)`, ema = 0.05 by default
              (chain 2: the same plus a fixed N(0, (0.5 std_d)^2) offset).

Block complexity counts the masks (as the paper does): `1 + nodes + masks <= BC`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.lazy import torch
from specbench_cli.methods.core.method import Method
from specbench_cli.options import opt

INITS = ("last", "gaussian", "mean")


@dataclass
class MaskProbeOptions:
    init: str = opt("mean", choices=INITS)  # last | gaussian | mean
    masks_per_step: int = opt(2, choices=(1, 2))  # 1 or 2 masks probe each future position
    steps: Optional[int] = opt(None, lo=1, hi=64)  # future positions probed; None: clamp((BC-1)//(m+2), 1, 6)
    top_k: int = opt(8, lo=1, hi=4096)  # candidates per probed position
    ema: float = opt(0.05, lo=0.0, hi=1.0)  # "mean" init: weight of each accepted token
    seed: int = 0                         # "gaussian" init and the "mean" second chain
    prune: bool = True                    # replace a child repeating its parent with the next best


def mask_steps(budget: int, masks_per_step: int, requested: Optional[int]) -> int:
    """Future positions probed per step at block complexity `budget`."""
    slots = budget - 1
    if slots <= 0:
        return 0
    if requested is not None:
        return max(0, min(requested, slots // masks_per_step))
    return min(max(1, min(6, slots // (masks_per_step + 2))), slots // masks_per_step)


def best_first_tree(cands: list[tuple[list[int], list[float]]], root_token: int, n: int,
                    width: Optional[int] = None, prune: bool = True) -> tuple[list[int], list[int]]:
    """The `n` highest cumulative-probability nodes over per-depth candidate lists.

    cands[d] = (tokens, probs) for depth d+1, best first. A node's children are the
    candidates of the next depth minus its own token (pruning: a child never repeats its
    parent; depth-1 children never repeat `root_token`; the next best candidate takes the
    pruned one's place), at most `width` per node. Returns `(tokens, parents)` in
    insertion order (parents before children).
    """
    tokens: list[int] = []
    parents: list[int] = []
    if n <= 0 or not cands:
        return tokens, parents
    depth = len(cands)
    if width is None:
        width = max(len(c[0]) for c in cands)

    def child(d: int, after: int, parent_tok: int) -> int:
        """Index of the first candidate at depth d (0-based) beyond `after` not equal to parent_tok."""
        toks = cands[d][0]
        i = after + 1
        if not prune:
            return i if i < min(width, len(toks)) else -1
        while i < len(toks) and toks[i] == parent_tok:
            i += 1
        if i >= len(toks):
            return -1
        # at most `width` children: the extra candidate only stands in for a pruned one
        return i if i < width or parent_tok in toks[:i] else -1

    # heap entries: (-cum prob, tie, depth, cand index, parent node, parent token, parent cum prob)
    heap: list = []
    tie = 0
    first = child(0, -1, root_token)
    if first >= 0:
        heap.append((-cands[0][1][first], tie, 0, first, -1, root_token, 1.0))
    while heap and len(tokens) < n:
        neg, _, d, i, par, par_tok, par_p = heapq.heappop(heap)
        tok = cands[d][0][i]
        node = len(tokens)
        tokens.append(tok)
        parents.append(par)
        p = -neg
        if d + 1 < depth:  # top-1 expansion
            c = child(d + 1, -1, tok)
            if c >= 0:
                tie += 1
                heapq.heappush(heap, (-(p * cands[d + 1][1][c]), tie, d + 1, c, node, tok, p))
        s = child(d, i, par_tok)  # next sibling
        if s >= 0:
            tie += 1
            heapq.heappush(heap, (-(par_p * cands[d][1][s]), tie, d, s, par, par_tok, par_p))
    return tokens, parents


class MaskProbe(Method):
    name = "mask-probe"
    summary = "mask-token probing in embedding space: training-free multi-token prediction tree"
    structure = Structure.TREE
    needs = ("token_embeddings", "input_embeddings")
    Options = MaskProbeOptions

    def plan(self) -> None:
        o = self.opts
        # BC 2 has room for one mask only: probe with one chain there
        m = self.chains = max(1, min(o.masks_per_step, self.ctx.budget - 1))
        self.steps = mask_steps(self.ctx.budget, m, o.steps)
        self.n_masks = m * self.steps
        self.n_nodes = max(0, self.ctx.budget - 1 - self.n_masks)

    def setup(self) -> None:
        o, m = self.opts, self.chains
        embed = self.ctx.target.token_embeddings()
        self.table = embed.weight.detach()                              # [V, H]
        # models that scale token embeddings in the embedding module (Gemma) get masks on
        # the same scale, since the engine passes mask vectors as ready input embeddings
        self.scale = float(getattr(embed, "embed_scale", 1.0))
        self.device, self.dtype = self.table.device, self.table.dtype
        table = self.table.float()
        self.emb_mean = table.mean(0)                                   # [H]
        self.emb_std = table.std(0)                                     # [H]
        gen = torch.Generator().manual_seed(o.seed)
        h = table.shape[1]
        # drawn once per run (fixed seed): chain c, mask j
        self.noise = torch.randn((m, max(self.steps, 1), h), generator=gen)
        # drawn on the host (the same numbers on every device), kept beside the table
        self.jitter = (torch.randn((h,), generator=gen).to(self.device) * 0.5 * self.emb_std)

    def params(self) -> dict:
        o = self.opts
        return {"structure": self.structure.value, "init": o.init, "masks_per_step": self.chains, "steps": self.steps,
                "masks": self.n_masks, "tree_nodes": self.n_nodes, "top_k": o.top_k,
                "ema": o.ema if o.init == "mean" else None, "prune": o.prune, "seed": o.seed}

    def label(self) -> str:
        return f"mask-probe({self.opts.init},m={self.opts.masks_per_step})"

    # -- mask embeddings ------------------------------------------------------------------------
    def init_masks(self, prompt_ids: list[int]) -> torch.Tensor:
        """`[chains, S, H]` mask embeddings (float32, on the table's device) for this prompt."""
        m, s, h = self.chains, self.steps, self.table.shape[1]
        init = self.opts.init
        if init == "gaussian":
            return self.emb_mean + self.noise[:, :s].to(self.device) * self.emb_std
        ids = torch.tensor(prompt_ids or [0], dtype=torch.long, device=self.device)
        if init == "last":
            need = m * s
            last = ids[-need:]
            if last.numel() < need:  # short prompt: repeat its first token in front
                last = torch.cat([last[:1].expand(need - last.numel()), last])
            vecs = self.table[last].float().view(m, s, h)             # chain 0 = most recent
            return vecs.flip(0)
        self.mean = self.table[ids].float().mean(0)                   # "mean": kept on the device
        return self._mean_masks()

    def _mean_masks(self) -> torch.Tensor:
        base = self.mean.expand(self.steps, -1)
        chains = [base] + [base + self.jitter] * (self.chains - 1)
        return torch.stack(chains)

    # -- drafter contract ---------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        # init_masks and _mean_masks work on the table's device: only the dtype changes here
        self.masks = (self.init_masks(prompt_ids) * self.scale).to(dtype=self.dtype)
        self.cands: list[tuple[list[int], list[float]]] = []  # per next depth: (tokens, probs)
        self.mask_nodes: list[list[int]] = []                   # per chain: node index of mask j

    def propose(self, state: DecodeState) -> Draft:
        self.mask_nodes = []
        if self.steps == 0:
            return Draft()
        n_nodes, masks = self.n_nodes, True
        if n_nodes == 0 and self.cands:
            # BC too small for masks and a draft at once (BC 2): alternate probe and draft steps
            n_nodes, masks = state.budget - 1, False
        ids = state.ids
        # Pruning targets the masks' echo of their input; when the verified text itself just
        # repeated a token, the repeat is the likeliest continuation, so it is kept.
        prune = self.opts.prune and not (len(ids) > 1 and ids[-1] == ids[-2])
        tokens, parents = best_first_tree(self.cands, ids[-1], min(n_nodes, state.remaining), self.opts.top_k,
                                          prune)
        acceptable = [True] * len(tokens)
        embeds: dict[int, torch.Tensor] = {}
        if masks:
            for c in range(self.chains):
                chain = []
                for j in range(self.steps):
                    node = len(tokens)
                    tokens.append(0)
                    parents.append(chain[-1] if chain else -1)
                    acceptable.append(False)
                    embeds[node] = self.masks[c, j]
                    chain.append(node)
                self.mask_nodes.append(chain)
        return Draft(tokens=tokens, parents=parents, acceptable=acceptable, embeds=embeds or None)

    def host_values(self, logits: torch.Tensor) -> Optional[torch.Tensor]:
        """The candidates of every probed depth, `[2, S, k]` (ids, probabilities): the top-k of
        each depth's mask row (or of the mean of the chains' distributions there), computed on
        the device before the verdict and brought to the host in the loop's one transfer;
        `observe` keeps the depths past the accepted path. None on a step without masks."""
        if not self.mask_nodes:
            return None
        m = len(self.mask_nodes)
        # each chain's masks are consecutive nodes: its rows are a slice (no index copied to the device)
        chains = [logits[self.mask_nodes[c][0] + 1:self.mask_nodes[c][-1] + 2] for c in range(m)]
        x = (chains[0] if m == 1 else torch.cat(chains)).float()  # [m * S, V]
        k = min(self.opts.top_k + 1, x.shape[-1])         # +1: pruning may drop one candidate
        if m == 1:  # top-k of the logits, normalised by one logsumexp pass (no full softmax)
            top = x.topk(k, dim=-1)
            values = (top.values - x.logsumexp(-1, keepdim=True)).exp_()
        else:       # mean of the chains' distributions at each depth
            probs = torch.softmax(x, dim=-1)
            n = probs.shape[0] // m
            summed = probs[:n]
            for c in range(1, m):
                summed = summed + probs[c * n:(c + 1) * n]
            top = summed.topk(k, dim=-1)
            values = top.values / m
        return torch.stack([top.indices.double(), values.double()])  # float64 holds both exactly

    def observe(self, result: VerifyResult) -> None:
        if self.steps == 0:  # no room for masks at this budget (BC 1): nothing to keep up to date
            return
        if self.opts.init == "mean" and self.opts.ema > 0:
            # on the device: one row view per token (plain indexing: no index list copied to the
            # device), one EMA update per accepted token (bonus included); nothing read back
            w = self.opts.ema
            for t in result.new_tokens:
                self.mean.mul_(1 - w).add_(self.table[t].float(), alpha=w)
            self.masks = (self._mean_masks() * self.scale).to(dtype=self.dtype)
        if not self.mask_nodes:
            self.cands = []
            return
        first = len(result.accepted)  # next depth d reads mask first + d (1-based): 0-based index in a chain
        if first >= self.steps:
            self.cands = []
            return
        flat = result.values
        if flat is None:  # a result made by hand (no loop): the same work, read here
            flat = self.host_values(result.logits).reshape(-1).tolist()
        half = len(flat) // 2
        k = half // self.steps
        ids, probs = flat[:half], flat[half:]
        self.cands = [([int(t) for t in ids[j * k:(j + 1) * k]], probs[j * k:(j + 1) * k])
                      for j in range(first, self.steps)]
