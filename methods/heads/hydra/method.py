"""Hydra (Ankner et al. 2024) with Hydra heads: trained here (`specbench train heads --kind hydra`)
or imported from the published checkpoints (`specbench heads import`, Hydra++ `prefix-mlp`).

The heads are Medusa's made sequentially dependent (methods/heads/hydra/model.py): head i reads the
base state at the last accepted position and the embeddings of the root and the i tokens
drafted above the node. With `prefix-mlp` heads the base state is one extra decoder layer over
the target's features, with its own KV cache: each `propose` feeds it the positions that joined
the sequence since the last one (`state.hidden`, as EAGLE's head), so nothing is ever rolled back.
The draft is a static tree of rank paths (`-o hydra.choices=`, default `mc_sim_7b_63`, Hydra's
and Spec-Bench's), the first BC - 1 nodes of it, built depth by depth with one batched head call
per depth. Greedy verification walks the longest matching path: lossless.

Heads trained here share the target's LM head, so the draft vocabulary applies (option `vocab`,
methods/heads/common.py); published heads have their own LM heads over the full vocabulary.
Under sampling (or `-o hydra.chain=true`) the draft is a chain of min(H, BC - 1) tokens, each
drawn from head i given the tokens drawn before it, with those rows as `Draft.probs`.
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
class HydraOptions:
    heads: Optional[str] = None  # heads folder from `specbench train heads --kind hydra` or `specbench heads import`
    choices: str = "mc_sim_7b_63"  # the static tree: mc_sim_7b_63 (Hydra's default) | vicuna_7b_stage2 | eagle1_25 | FILE.json
    vocab: str = opt("auto", choices=VOCAB_MODES)  # draft vocabulary: auto (the heads' training vocabulary + the prompt's tokens) | full
    chain: bool = False          # draft each head's top-1 given the ones above (a chain); always a chain under sampling


class Hydra(HeadsMethod):
    name = "hydra"
    kind = "hydra"
    summary = "Hydra heads (-o hydra.heads=DIR): sequentially dependent heads, static tree of BC-1 nodes"
    Options = HydraOptions

    def plan_tree(self) -> None:
        from specbench_cli.methods.core.tree_shapes import read_paths

        self.paths = tuple(tuple(p) for p in read_paths(self.opts.choices, "hydra.choices"))  # hashable: the plan is cached

    def setup(self) -> None:
        super().setup()
        self.device = self.ctx.target.device

    def tree_params(self) -> dict:
        return {"choices": self.opts.choices, "paths": len(self.paths)}

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self.cache = self.head.new_cache()

    def _base(self, state: DecodeState) -> torch.Tensor:
        """Feed the pending positions to the prefix layer; the base state [h] at the root's parent."""
        k, root_pos = state.hidden.shape[0], len(state.ids) - 1
        if self.head.prefix is not None and self.cache.length != root_pos - k:
            raise RuntimeError(f"hydra: prefix cache holds {self.cache.length} positions, expected {root_pos - k}")
        pos = torch.arange(root_pos - k, root_pos, device=self.device)
        return self.head.base(self.cache, state.hidden.to(self.device), pos)[-1]

    @inference_mode
    def absorb(self, state: DecodeState) -> None:
        """Feed the pending positions to the prefix layer without drafting (for a method that
        wraps this one and drafts by other means this step, e.g. samd, suffix)."""
        if self.head.prefix is not None and state.budget - 1 > 0 and state.remaining > 1:
            self._base(state)

    @inference_mode
    def propose(self, state: DecodeState) -> Draft:
        n = state.budget - 1
        if n <= 0 or state.remaining <= 1:
            return Draft()  # nothing drafted now and (last step or BC 1) never again: no need to feed
        base = self._base(state)
        if self.chain:
            return self._chain(base, state.ids[-1], min(n, self.head.n_heads))
        from specbench_cli.methods.heads.draft_trees import hydra_tree

        tree = hydra_tree(self.head, base, state.ids[-1], self.paths, budget=n)
        return Draft(tokens=tree.tokens, parents=tree.parents)

    def _chain(self, base: torch.Tensor, root: int, n: int) -> Draft:
        embs = self.head.embed_tokens(torch.tensor([root], device=self.device))
        drafted: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(n):
            logits = self.head.head_logits(i, base[None], embs.reshape(1, -1))[0]
            tok, p = pick(logits, self.ctx.sampling, self.rng, self.head, self.ckpt.target_vocab)
            drafted.append(tok)
            if p is not None:
                rows.append(p)
            embs = torch.cat([embs, self.head.embed_tokens(torch.tensor([tok], device=self.device))])
        return Draft.chain(drafted, torch.stack(rows) if rows else None)
