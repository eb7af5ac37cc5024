"""DFlash (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative Decoding") with a
trained (`specbench train heads --kind dflash`) or published z-lab drafter (-o dflash.heads=DIR).

One drafter forward per step drafts a whole block: [root, mask, ..., mask] (block_size tokens, the
drafter's own block size), every position attending to every other and to the context keys/values
the drafter made from the target's multi-layer hidden states (methods/heads/dflash/model.py). Those
states come from the verify forward itself (`Drafter.hidden_layers`: the outputs of the drafter's
`target_layer_ids`), and the drafter's cache of context keys/values grows by the positions the
target accepted; the block itself never enters it. Position j of the block proposes the token j
places after the root: the draft is the chain of the first min(block_size, BC) - 1 of them (a budget
smaller than the block cuts the draft; the block the drafter sees is always the one it was trained
on). Greedy: each position's argmax. Sampling: each position's token is drawn from its own
distribution (after the target's temperature / top-p), which does not depend on the other drafted
tokens, and those rows go to the speculative-sampling verifier as `Draft.probs`. The target verifies
every token: lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure
from specbench_cli.lazy import inference_mode, torch
from specbench_cli.methods.heads.common import HeadsCheckpoint, HeadsMethod, pick


@dataclass
class DFlashOptions:
    heads: Optional[str] = None  # a DFlash drafter folder (`specbench train heads --kind dflash`, or z-lab's published one)


class DFlash(HeadsMethod):
    name = "dflash"
    kind = "dflash"
    summary = "DFlash block-diffusion drafter (-o dflash.heads=DIR): a block of masks drafted in one forward"
    Options = DFlashOptions
    structure = Structure.CHAIN
    needs = HeadsMethod.needs + ("layer_features",)

    def plan(self) -> None:
        self.ckpt = HeadsCheckpoint(self.name, self.kind, self.opts.heads, self.ctx.target_ref, "full")
        if self.ctx.target_ref:  # the layers it reads against the target's header, before the target loads
            from specbench_cli.errors import UsageError
            from specbench_cli.methods.heads.dflash.kind import check_layers
            from specbench_cli.methods.heads.dflash.model import dflash_field
            from specbench_cli.models.load import declared_layers

            try:
                n = declared_layers(str(self.ctx.target_ref))
            except UsageError:
                n = None  # the target reference itself is checked (and named) by the run
            check_layers(dflash_field(self.ckpt.config, "target_layer_ids"), n, self.ckpt.folder,
                         self.ckpt.config.get("num_target_layers"))
        self.chain = True

    def setup(self) -> None:
        super().setup()
        self.hidden_layers = self.head.feature_layers()
        self.device = self.ctx.target.device

    def tree_params(self) -> dict:
        from specbench_cli.methods.heads.dflash.model import DEFAULT_BLOCK, dflash_field

        cfg = self.ckpt.config
        return {"block_size": dflash_field(cfg, "block_size", DEFAULT_BLOCK),
                "target_layer_ids": dflash_field(cfg, "target_layer_ids"),
                "mask_token_id": dflash_field(cfg, "mask_token_id")}

    def reset(self, prompt_ids: list[int]) -> None:
        self.cache = self.head.new_cache()

    def _feed(self, state: DecodeState) -> None:
        k, root_pos = state.hidden.shape[0], len(state.ids) - 1
        if self.cache.length != root_pos - k:  # the loop hands every accepted position exactly once
            raise RuntimeError(f"dflash: drafter cache holds {self.cache.length} positions, expected {root_pos - k}")
        self.head.absorb(self.cache, state.hidden)

    @inference_mode
    def absorb(self, state: DecodeState) -> None:
        """Feed the accepted positions without drafting (a method that wraps this one and drafts
        by other means this step: samd, suffix)."""
        if state.budget - 1 <= 0 or state.remaining <= 1:
            return
        self._feed(state)

    @inference_mode
    def propose(self, state: DecodeState) -> Draft:
        n = min(state.budget, self.head.block_size) - 1
        if n <= 0 or state.remaining <= 1:
            return Draft()  # nothing drafted now and (last step or BC 1) never again: no need to feed
        self._feed(state)
        logits = self.head.draft_logits(self.cache, state.ids[-1])[:n]
        if self.ctx.sampling.greedy:
            return Draft.chain(logits.argmax(-1).tolist())
        drafted, rows = [], []
        for row in logits:
            tok, p = pick(row, self.ctx.sampling, self.rng, self.head, self.ckpt.target_vocab)
            drafted.append(tok)
            rows.append(p)
        return Draft.chain(drafted, torch.stack(rows))
