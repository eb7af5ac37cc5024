"""EAGLE-2 (Li et al. 2024) with a trained EAGLE head (K decoder layers; KOALA's K = 2-3, plain
or adversarially trained; `specbench train heads --kind eagle`).

The head reads pairs (target feature at position t, token t+1) and keeps its own KV cache,
indexed by target position. Each `propose` feeds the pairs that joined the sequence since the
last one (`state.hidden`: the whole prompt at step 0, then the previous root and the accepted
path, paired with the tokens after them; the last pair's token is the root), then drafts the
EAGLE-2 dynamic tree (`methods/heads/draft_trees.py: eagle2_tree`): expand the top_k frontier by cumulative
log-probability for `depth` levels, rerank every drafted node, keep the best BC - 1. Drafted
nodes leave the head's cache again; the committed pairs stay, so the cache always ends at the
root's position. Greedy verification walks the longest matching path: lossless.

Defaults depth = min(5, BC-1) and top_k = min(10, BC-1) (EAGLE-2's 5 and 10): a frontier
node ranked below BC-1 on its level, or a level deeper than BC-1, can never be kept.

The head's logits cover the draft vocabulary (option `vocab`, see methods/heads/common.py): with `auto`
the training sub-vocabulary plus the prompt's tokens, which makes the LM-head product per tree
node ~10x cheaper; exactness is the target's verification either way.

Under sampling (or `-o eagle.chain=true`) the draft is a chain of BC - 1 tokens: each sampled
from the head's distribution after the target's temperature / top-p and fed back to the head,
with the rows as `Draft.probs` for the speculative-sampling verifier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState
from specbench_cli.lazy import inference_mode, torch
from specbench_cli.methods.heads.common import VOCAB_MODES, HeadsMethod, pick
from specbench_cli.options import opt


@dataclass
class EagleOptions:
    heads: Optional[str] = None  # heads folder from `specbench train heads --kind eagle`
    depth: Optional[int] = opt(None, lo=1, hi=64)  # tree levels; None: min(5, BC-1)
    top_k: Optional[int] = opt(None, lo=1, hi=4096)  # children per node and frontier width; None: min(10, BC-1)
    vocab: str = opt("auto", choices=VOCAB_MODES)  # draft vocabulary: auto (the heads' training vocabulary + the prompt's tokens) | full
    chain: bool = False          # draft the head's greedy chain (KOALA's n-alpha); always a chain under sampling
    tree: str = "dynamic"        # dynamic (EAGLE-2) | eagle1_25 (EAGLE-1's static tree) | mc_sim_7b_63 | FILE.json


class Eagle(HeadsMethod):
    name = "eagle"
    kind = "eagle"
    summary = "EAGLE-2 head (-o eagle.heads=DIR): dynamic tree of BC-1 nodes from the target's hidden states"
    Options = EagleOptions

    def plan_tree(self) -> None:
        from specbench_cli.methods.core.tree_shapes import read_paths

        self.static = None if self.opts.tree == "dynamic" else \
            tuple(tuple(p) for p in read_paths(self.opts.tree, "eagle.tree"))  # hashable: the plan is cached
        n = max(1, self.ctx.budget - 1)
        # Capped at BC-1: deeper levels or wider frontiers can never make the kept BC-1 nodes.
        self.depth = min(n, 5 if self.opts.depth is None else self.opts.depth)
        self.top_k = min(n, 10 if self.opts.top_k is None else self.opts.top_k)

    def setup(self) -> None:
        super().setup()
        self.device = self.ctx.target.device

    def tree_params(self) -> dict:
        if self.static is not None:
            return {"tree": self.opts.tree, "paths": len(self.static)}
        return {"depth": self.depth, "top_k": self.top_k}

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self.cache = self.head.new_cache()

    def _pending(self, state: DecodeState) -> tuple[torch.Tensor, torch.Tensor]:
        """(features [k, h], tokens [k]) of the pairs not yet in the head's cache; tokens[-1] = root."""
        k, root_pos = state.hidden.shape[0], len(state.ids) - 1
        if self.cache.length != root_pos - k:  # the loop hands every accepted position exactly once
            raise RuntimeError(f"eagle: head cache holds {self.cache.length} positions, expected {root_pos - k}")
        tokens = torch.tensor(state.ids[root_pos - k + 1:], dtype=torch.long, device=self.device)
        return state.hidden, tokens

    @inference_mode
    def absorb(self, state: DecodeState) -> None:
        """Feed the pending pairs into the head's cache without drafting (for a method that wraps
        this one and drafts by other means this step, e.g. samd, suffix)."""
        if state.budget - 1 <= 0 or state.remaining <= 1:
            return
        features, tokens = self._pending(state)
        base = self.cache.length
        self.head.step(self.cache, features, tokens, torch.arange(base, base + tokens.shape[0], device=self.device))

    @inference_mode
    def propose(self, state: DecodeState) -> Draft:
        n = state.budget - 1
        if n <= 0 or state.remaining <= 1:
            return Draft()  # nothing drafted now and (last step or BC 1) never again: no need to feed
        features, tokens = self._pending(state)
        if self.chain:
            return self._chain(features, tokens, n)
        from specbench_cli.methods.heads.draft_trees import eagle2_tree, eagle_static_tree

        if self.static is not None:
            tree = eagle_static_tree(self.head, self.cache, features, tokens, self.static, budget=n)
            return Draft(tokens=tree.tokens, parents=tree.parents)
        tree = eagle2_tree(self.head, self.cache, features, tokens, budget=n, depth=self.depth, top_k=self.top_k)
        return Draft(tokens=tree.tokens, parents=tree.parents)

    def _chain(self, features: torch.Tensor, tokens: torch.Tensor, n: int) -> Draft:
        """n tokens, each from the head's distribution given the ones before (greedy or sampled)."""
        base = self.cache.length
        root_pos = base + tokens.shape[0]  # the pair (feature at root_pos - 1, root) sits at root_pos - 1
        out, logits = self.head.step(self.cache, features, tokens, torch.arange(base, root_pos, device=self.device))
        committed = self.cache.length
        feat, row = out[-1:], logits[-1]
        drafted: list[int] = []
        rows: list[torch.Tensor] = []
        for d in range(n):
            tok, p = pick(row, self.ctx.sampling, self.rng, self.head, self.ckpt.target_vocab)
            drafted.append(tok)
            if p is not None:
                rows.append(p)
            if d < n - 1:  # the last token's successor is never needed
                feat, lg = self.head.step(self.cache, feat, torch.tensor([tok], device=self.device),
                                          torch.tensor([root_pos + d], device=self.device))
                row = lg[-1]
        self.cache.crop(committed)  # drafted tokens leave the cache; the target may reject them
        return Draft.chain(drafted, torch.stack(rows) if rows else None)
