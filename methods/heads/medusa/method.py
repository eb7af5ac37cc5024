"""Medusa (Cai et al. 2024) with trained heads on the target's last hidden state (v2 heads: K
ResBlocks per head feeding the target's own LM head; `specbench train heads --kind medusa`).

At each step the heads read the target's final-norm state at the position before the root
(its logits gave the root): head i predicts the token at depth i + 1 below the root. The
draft is a static tree: a list of top-k rank paths, best first (`default_medusa_paths`, a
prior over head accuracy and rank), taken until BC - 1 nodes; node (r1, ..., rd) holds head
d's rank-rd token. Greedy verification walks the longest path matching the target: lossless.

The logits cover the draft vocabulary (option `vocab`, see methods/heads/common.py; `auto` = the training
sub-vocabulary plus the prompt's tokens); the target verifies every draft either way.

Under sampling (or `-o medusa.chain=true`) the draft is a chain of min(H, BC - 1) tokens, one
per head, sampled from each head's distribution after the target's temperature / top-p, with
those rows as `Draft.probs` so the speculative-sampling verifier keeps the output exact. (The
heads do not condition on the tokens drafted above them, so each row is the distribution
the token was drawn from: what the verifier needs.)
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
class MedusaOptions:
    heads: Optional[str] = None  # heads folder from `specbench train heads --kind medusa`
    choices: Optional[str] = None  # a static tree: mc_sim_7b_63 (Spec-Bench's) | vicuna_7b_stage2 | eagle1_25 | FILE.json; None: the prior tree
    width: int = opt(10, lo=1, hi=1024)  # ranks per head considered by the path list
    vocab: str = opt("auto", choices=VOCAB_MODES)  # draft vocabulary: auto (the heads' training vocabulary + the prompt's tokens) | full
    chain: bool = False          # draft each head's top-1 as a chain (KOALA's n-alpha); always a chain under sampling


class Medusa(HeadsMethod):
    name = "medusa"
    kind = "medusa"
    summary = "Medusa heads (-o medusa.heads=DIR): static top-k tree of BC-1 nodes from the target's hidden state"
    Options = MedusaOptions

    def plan_tree(self) -> None:
        from specbench_cli.methods.core.tree_shapes import read_paths

        self.fixed = read_paths(self.opts.choices, "medusa.choices") if self.opts.choices else None
        self.paths: list[list[int]] = []

    def setup(self) -> None:
        from specbench_cli.methods.core.tree_shapes import default_medusa_paths

        super().setup()
        self.paths = self.fixed or default_medusa_paths(self.head.n_heads, self.opts.width, limit=2 * self.ctx.budget + 8)  # slack: paths past the heads or vocabulary are skipped

    def tree_params(self) -> dict:
        return {"width": self.opts.width, "paths": len(self.paths), "choices": self.opts.choices}

    @inference_mode
    def propose(self, state: DecodeState) -> Draft:
        n = state.budget - 1
        if n <= 0 or state.remaining <= 1:
            return Draft()
        logits = self.head.head_logits(state.hidden[-1])  # [H, V'] (draft vocabulary): row i = depth i + 1
        if self.chain:
            picks = [pick(row, self.ctx.sampling, self.rng, self.head, self.ckpt.target_vocab) for row in logits[: min(n, logits.shape[0])]]
            probs = torch.stack([p for _, p in picks]) if picks[0][1] is not None else None
            return Draft.chain([t for t, _ in picks], probs)
        from specbench_cli.methods.heads.draft_trees import medusa_tree

        tree = medusa_tree(logits, self.paths, budget=n, ids=self.head.draft_ids)
        return Draft(tokens=tree.tokens, parents=tree.parents)
