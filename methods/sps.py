"""Speculative sampling (SpS) with a small draft model (Leviathan et al. 2023; Chen et al. 2023).

Each step the draft model extends the sequence autoregressively by `gamma` tokens (a chain);
the target verifies root + chain in one forward. Greedy: drafts are the draft model's argmax
and the verifier keeps the longest prefix equal to the target's argmax, then the target's
bonus token. Sampling: drafts are sampled from the draft model's distribution after the SAME
temperature / top-p processing as the target (`target_probs`), and the rows are returned as
`Draft.probs` so the verifier applies speculative sampling (accept min(1, q/p), resample
from max(q - p, 0), bonus from q) - the output is distributed exactly as sampling the target.

The draft model keeps its own KV cache, always holding a prefix of the accepted sequence:
`processed` tokens of it. A step feeds the draft model what it has not seen yet (the root,
plus on the step after a fully accepted chain the last draft token too: "catch up") and then
gamma-1 draft tokens (the last draft token's logits are never needed). After the verdict
the cache is cropped to the accepted prefix. So every draft forward produces a draft token;
none is spent only to keep the caches in step (gpt-fast spends one after full acceptance).

Block complexity: one verify forward processes root + gamma tokens, so gamma = BC - 1 by
default; the option `gamma` can only lower it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.decoding.verify import target_probs
from specbench_cli.errors import UsageError
from specbench_cli.lazy import inference_mode, torch
from specbench_cli.methods.core.method import Method
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

# Strings whose encodings must agree between target and draft tokenizers (besides the vocab).
PROBE_TEXTS = (
    "Hello world! Please write a short story about the sea.",
    "def sum_of(xs):\n    return sum(x * 2 for x in xs)  # 42",
    "Translate to French: the cat sat on the mat. \u00e9t\u00e9, na\u00efve, \u4f60\u597d",
)


@dataclass
class SpSOptions:
    gamma: Optional[int] = opt(None, lo=0, hi=MAX_BUDGET)  # draft tokens per step; None: block complexity - 1 (capped at it anyway)
    draft_model: Optional[str] = None  # overrides --draft-model (several drafters in one run, under aliases)


def check_tokenizers(target_tok, draft_tok, draft_ref: str) -> None:
    """UsageError unless the two tokenizers map text to the same ids (vocab + probe encodings)."""
    tv, dv = target_tok.get_vocab(), draft_tok.get_vocab()
    if tv != dv:
        only_t = len(set(tv.items()) - set(dv.items()))
        only_d = len(set(dv.items()) - set(tv.items()))
        raise UsageError(f"draft model {draft_ref} has a different tokenizer than the target "
                         f"(vocab sizes {len(tv)} vs {len(dv)}; {only_t} target and {only_d} draft entries "
                         f"differ); sps needs a draft model with the target's tokenizer")
    for text in PROBE_TEXTS:
        a = target_tok(text, add_special_tokens=False)["input_ids"]
        b = draft_tok(text, add_special_tokens=False)["input_ids"]
        if list(a) != list(b):
            raise UsageError(f"draft model {draft_ref} tokenizes text differently from the target "
                             f"(e.g. {text[:30]!r}: {list(a)[:8]} vs {list(b)[:8]}); sps needs the target's tokenizer")


class SpeculativeSampling(Method):
    name = "sps"
    summary = "speculative sampling with a draft model (--draft-model): gamma = BC-1 draft tokens per step"
    lossless = True
    needs_training = True  # needs a draft model: not in the default method list
    requires = ("draft_model",)
    structure = Structure.CHAIN
    Options = SpSOptions

    # -- configuration ----------------------------------------------------------------------
    def plan(self) -> None:
        ctx = self.ctx
        self.draft_ref = self.opts.draft_model or ctx.draft_model
        if not self.draft_ref:
            raise UsageError("method sps needs a draft model: pass --draft-model (a model folder, .gguf file "
                             "or alias with the target's tokenizer) or --option sps.draft_model=REF")
        from specbench_cli.models.load import check_hub_model, declared_context

        declared_context(str(self.draft_ref))  # a missing or damaged draft model: before the target loads
        check_hub_model(str(self.draft_ref), "draft model")  # a hub id: cached, or known to a reachable hub
        g = self.opts.gamma
        self.gamma = max(0, ctx.budget - 1) if g is None else min(g, max(0, ctx.budget - 1))
        self.draft_name = Path(str(self.draft_ref)).name or str(self.draft_ref)

    def setup(self) -> None:
        """Load the draft model (the heavy part) and check it shares the target's tokenizer."""
        from specbench_cli.models.load import load_model

        ctx = self.ctx
        lm = load_model(self.draft_ref, device=ctx.device, dtype=ctx.dtype, trust_remote_code=ctx.trust_remote_code)
        if ctx.tokenizer is not None:
            check_tokenizers(ctx.tokenizer, lm.tokenizer, self.draft_ref)
        self.draft = lm.target  # the draft model computes through the same protocol as the target
        self.draft_params = lm.params
        # Rows of `Draft.probs` must be as wide as the target's logits; identical tokenizers can
        # still come with differently padded embedding matrices.
        self.v_target = ctx.target.vocab_size if ctx.target is not None else self.draft.vocab_size
        self.v_draft = self.draft.vocab_size
        # One stream for the whole run: fresh randomness for every generation (a draft token
        # must be a new sample from p each time for speculative sampling to be exact).
        self.rng = torch.Generator(device="cpu").manual_seed((int(ctx.seed) * 1_000_003 + 0x5B5) & 0x7FFFFFFF)
        self.batch = None  # the draft model's keys/values (a batch of one), from the first propose on
        self.processed = 0

    @property
    def extra_params(self) -> int:
        return int(self.draft_params)

    def params(self) -> dict:
        return {"structure": self.structure.value, "gamma": self.gamma, "draft_model": str(self.draft_ref)}

    def label(self) -> str:
        return f"sps({self.draft_name},g={self.gamma})"

    # -- the drafter contract -----------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.batch = None
        self.processed = 0      # tokens of the sequence whose keys/values are in the draft cache
        self._step_base = None  # len(state.ids) at the last propose that ran the draft model
        self._fed_drafts = 0    # draft tokens of that step fed to the draft model

    def _next_dist(self, ids: list[int]) -> torch.Tensor:
        """Feed `ids` to the draft model after its cache; `[V]` logits after the last one."""
        if self.batch is None:  # the prompt: a prefill (logits of its last position only)
            self.batch, (fwd,) = self.draft.start([list(ids)], 0)
        else:
            past = self.batch.length
            fwd = self.draft.verify(self.batch, [ids[0]], [Draft.chain(list(ids[1:]))])
            self.draft.commit(self.batch, past, [list(range(len(ids)))])
        self.processed += len(ids)
        return fwd.logits[-1]

    def _pick(self, logits: torch.Tensor) -> tuple[int, Optional[torch.Tensor]]:
        sampling = self.ctx.sampling
        if self.v_draft > self.v_target:
            logits = logits[: self.v_target]
        if sampling.greedy:
            return int(logits.argmax()), None
        p = target_probs(logits, sampling).to("cpu", torch.float32)
        if p.shape[-1] < self.v_target:
            p = torch.cat([p, p.new_zeros(self.v_target - p.shape[-1])])
        return int(torch.multinomial(p, 1, generator=self.rng)), p

    @inference_mode
    def propose(self, state: DecodeState) -> Draft:
        n = min(self.gamma, state.budget - 1, state.remaining - 1)
        if n <= 0:
            self._step_base = None
            return Draft()
        ids = state.ids
        if self.processed > len(ids):  # cannot happen with the engine's loop; be safe, not wrong
            self.draft.crop(self.batch, len(ids) - 1)
            self.processed = len(ids) - 1
        # catch up: the root, plus the last draft token after a fully accepted step
        logits = self._next_dist(ids[self.processed:])
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(n):
            tok, p = self._pick(logits)
            tokens.append(tok)
            if p is not None:
                rows.append(p)
            if i < n - 1:
                logits = self._next_dist([tok])
        self._step_base = len(ids)
        self._fed_drafts = n - 1
        return Draft.chain(tokens, torch.stack(rows) if rows else None)

    def observe(self, result: VerifyResult) -> None:
        if self._step_base is None:
            return
        # Keep the root's prefix and the accepted drafts the draft model has already seen.
        keep = self._step_base + min(len(result.accepted), self._fed_drafts)
        self.draft.crop(self.batch, keep)
        self.processed = keep
        self._step_base = None
