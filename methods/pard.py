"""PARD: a parallel draft model (An et al., "PARD: Accelerating LLM Inference with Low-Cost
PARallel Draft Model Adaptation", 2025).

A small draft model with the target's tokenizer, adapted (training/draft_model/pard.py) to predict
several tokens in ONE forward: after the accepted text it reads K-1 copies of a mask token (the
id its config.json records as `pard_token`) and its logits at the last accepted token and at the
K-1 masks are its guesses for the next K tokens. The target verifies root + those K tokens as a
chain, exactly as for sps.

- Greedy: each draft token is the argmax of its row; the verifier keeps the longest prefix
  equal to the target's argmax (output = AR's).
- Sampling: draft token i is sampled from row i after the same temperature / top-p processing
  as the target, and the rows go to the verifier as `Draft.probs` (the sps rules: accept
  min(1, q/p), resample from max(q - p, 0), bonus from q). Row i does not depend on the earlier
  draft tokens (the masks stand in for them); a proposal that ignores part of its condition is
  still a proposal, so the output is distributed exactly as sampling the target.

The draft model keeps its own KV cache, holding the accepted sequence only: a step feeds what it
has not seen (the tokens accepted since the last step, root included) followed by the K-1 masks,
in one forward, then drops the masks' keys/values. Nothing is fed after the verdict: the next
step's forward carries the new tokens. One draft forward per step, whatever K.

Block complexity: the verify forward processes root + K tokens, so K = BC - 1 by default; the
option `k` can only lower it. Mask tokens run in the draft model's forward, not the target's, so
they do not count towards BC. An adaptive budget may verify a prefix of the chain: each node's
signal class is the drafter's probability of its token in tenths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.lazy import inference_mode, torch
from specbench_cli.methods.sps import SpeculativeSampling
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

MASK_KEY = "pard_token"  # the published drafters' config.json key for the mask token id
TYPE_KEY = "spd_type"    # and "pard" under this key
ALIASES = ("ptd_token_id",)  # another name some parallel-drafting configs use for the same id


@dataclass
class PardOptions:
    k: Optional[int] = opt(None, lo=1, hi=MAX_BUDGET)  # draft tokens per step (K); None: block complexity - 1 (capped at it anyway)
    mask_id: Optional[int] = opt(None, lo=0, hi=1 << 30)  # the mask token id; None: the draft model's config.json `pard_token`
    draft_model: Optional[str] = None  # overrides --draft-model


def folder_mask_id(config: Optional[dict]) -> Optional[int]:
    """The mask token id a PARD drafter's config declares (None when it declares none)."""
    if not isinstance(config, dict):
        return None
    value = next((config[key] for key in (MASK_KEY, *ALIASES) if key in config), None)
    if isinstance(value, list) and value:  # a list of ids (one per mask position): the first
        value = value[0]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class Pard(SpeculativeSampling):
    name = "pard"
    summary = "PARD parallel draft model (--draft-model with a mask token): K = BC-1 draft tokens in one draft forward"
    lossless = True
    needs_training = True  # needs a PARD draft model: not in the default method list
    requires = ("draft_model",)
    structure = Structure.CHAIN
    draft_format = "pard"  # the draft model must declare a mask token (tests supply a tiny PARD drafter)
    adaptive_budget = True  # plain chains; observe reads nothing of the draft
    Options = PardOptions

    # -- configuration ----------------------------------------------------------------------
    def plan(self) -> None:
        ctx = self.ctx
        self.draft_ref = self.opts.draft_model or ctx.draft_model
        if not self.draft_ref:
            raise UsageError("method pard needs a PARD draft model: pass --draft-model (a model folder whose "
                             f"config.json has `{MASK_KEY}`) or --option pard.draft_model=REF")
        from specbench_cli.models.load import _folder_config, check_hub_model, declared_context, declared_vocab, resolve

        declared_context(str(self.draft_ref))  # a missing or damaged draft model: before the target loads
        check_hub_model(str(self.draft_ref), "draft model")
        kind, location = resolve(str(self.draft_ref))
        self.mask_id = self.opts.mask_id
        if self.mask_id is None and kind == "folder":
            self.mask_id = folder_mask_id(_folder_config(location))
            if self.mask_id is None:
                raise UsageError(f"draft model {self.draft_ref} is not a PARD drafter: its config.json has no usable "
                                 f"`{MASK_KEY}` (the mask token id, an integer >= 0); train one with "
                                 f"`specbench train pard` or pass --option pard.mask_id=ID")
        elif self.mask_id is None and kind == "gguf":
            raise UsageError(f"draft model {self.draft_ref}: a GGUF file records no PARD mask token; "
                             f"pass --option pard.mask_id=ID")
        vocab = declared_vocab(str(self.draft_ref))
        if self.mask_id is not None and vocab is not None and self.mask_id >= vocab:
            raise UsageError(f"pard mask token id {self.mask_id} is outside the draft model's vocabulary "
                             f"({vocab} tokens)")
        k = self.opts.k
        self.gamma = max(0, ctx.budget - 1) if k is None else min(k, max(0, ctx.budget - 1))
        self.draft_name = Path(str(self.draft_ref)).name or str(self.draft_ref)

    def setup(self) -> None:
        super().setup()
        if self.mask_id is None:  # a hub id: its config is read only now
            self.mask_id = folder_mask_id(self.draft.model.config.to_dict())
            if self.mask_id is None:
                raise UsageError(f"draft model {self.draft_ref} is not a PARD drafter: its config has no `{MASK_KEY}`")
        if self.mask_id >= self.v_draft:
            raise UsageError(f"pard mask token id {self.mask_id} is outside the draft model's vocabulary "
                             f"({self.v_draft} rows)")

    def params(self) -> dict:
        return {"structure": self.structure.value, "k": self.gamma, "mask_id": self.mask_id,
                "draft_model": str(self.draft_ref)}

    def label(self) -> str:
        return f"pard({self.draft_name},k={self.gamma})"

    # -- the drafter contract -----------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.batch = None
        self.processed = 0  # tokens of the sequence whose keys/values are in the draft cache

    def _rows(self, ids: list[int], n: int) -> torch.Tensor:
        """`[n, V]` draft logits for the n tokens after `ids`: one forward over the unseen part
        of `ids` and n-1 masks; the masks' keys/values are dropped afterwards."""
        if self.batch is None:  # the prompt but its last token: that one leads the first forward
            self.batch, _ = self.draft.start([list(ids[:-1])], 0)
            self.processed = len(ids) - 1
        new = list(ids[self.processed:])
        feed = new + [self.mask_id] * (n - 1)
        past = self.batch.length
        fwd = self.draft.verify(self.batch, [feed[0]], [Draft.chain(feed[1:])])
        self.draft.commit(self.batch, past, [list(range(len(new)))])
        self.processed = len(ids)
        return fwd.logits[len(new) - 1: len(new) - 1 + n]

    @inference_mode
    def propose(self, state: DecodeState) -> Draft:
        n = min(self.gamma, state.budget - 1, state.remaining - 1)
        ids = state.ids
        if n <= 0 or len(ids) < 2:  # (a one-token sequence has no prefix to prefill: AR's step)
            return Draft()
        if self.processed >= len(ids):  # cannot happen with the engine's loop; be safe, not wrong
            self.draft.crop(self.batch, len(ids) - 1)
            self.processed = len(ids) - 1
        rows = self._rows(ids, n)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        signal: list[int] = []
        for i in range(n):
            tok, p = self._pick(rows[i])
            tokens.append(tok)
            if p is not None:
                probs.append(p)
            else:
                p = torch.softmax(rows[i, : self.v_target].float(), -1)
            signal.append(min(9, int(10 * float(p[tok]))))  # the drafter's confidence in tenths
        return Draft.chain(tokens, torch.stack(probs) if probs else None, signal=signal)

    def observe(self, result: VerifyResult) -> None:
        """Nothing: the draft cache holds the accepted sequence up to the root, and the tokens
        this step added are fed at the next step, in front of its masks."""
