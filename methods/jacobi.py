"""Jacobi decoding (Santilli et al., 2023): guess a window of future tokens and iterate to a fixed point.

The draft is a chain of `window` guesses `g[0..K-1]` for the positions after the root. One
target forward verifies the whole chain; the accepted prefix plus the bonus token are
committed. The same forward is also the next Jacobi iteration: row `i + 1` of the logits is
the target's prediction for the position after guess `i`, given the root and `g[0..i]`. With
`k` guesses accepted, the new root is the bonus (`preds[k]`) and the refreshed window is

    preds[k+1 .. K]   (K - k tokens: the iterate at the positions still unfixed)
    + k fill tokens   (positions beyond the old window, never predicted yet)

so no extra forward is spent on drafting. Under greedy verification the output equals AR
whatever the guesses are (the verifier only accepts tokens equal to the target's argmax).

Fill / initial guesses (`init`):
    prompt  random tokens of the prompt (seeded by the run seed; the LookaheadDecoding default)
    ahead   the last tokens known so far, copied forward (a shifted copy of the recent text:
            short-range repetition is common, and a copy of it is a better guess than noise)
    pad     the tokenizer's pad token (eos or 0 if it has none): the textbook Jacobi start
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

INIT_MODES = ("prompt", "ahead", "pad")


def pad_token_id(tokenizer) -> int:
    for attr in ("pad_token_id", "eos_token_id"):
        v = getattr(tokenizer, attr, None) if tokenizer is not None else None
        if isinstance(v, int):
            return v
    return 0


class GuessFiller:
    """Produces guesses for positions nothing has predicted yet (start and tail of a window)."""

    def __init__(self, mode: str, pad: int, seed: int) -> None:
        if mode not in INIT_MODES:
            raise UsageError(f"init must be one of {', '.join(INIT_MODES)} (got '{mode}')")
        self.mode, self.pad, self.seed = mode, pad, seed

    def reset(self, prompt_ids: list[int]) -> None:
        # One generator per prompt: the same prompt gets the same guesses in every run.
        self.rng = random.Random(self.seed)
        self.prompt = list(prompt_ids) or [self.pad]

    def fill(self, n: int, known: list[int]) -> list[int]:
        """`n` guesses to append after `known` (the tokens/guesses that precede them)."""
        if n <= 0:
            return []
        if self.mode == "prompt":
            choice, src = self.rng.choice, self.prompt
            return [choice(src) for _ in range(n)]
        if self.mode == "pad":
            return [self.pad] * n
        # ahead: the last n known tokens again (cycled when fewer are known)
        src = known[-n:] if known else [self.pad]
        return [src[i % len(src)] for i in range(n)]


@dataclass
class JacobiOptions:
    window: Optional[int] = opt(None, lo=0, hi=MAX_BUDGET)  # guesses per step; None: block complexity - 1
    init: str = opt("prompt", choices=INIT_MODES)  # prompt | ahead | pad: initial and tail-fill guesses


class Jacobi(Method):
    name = "jacobi"
    summary = "Jacobi decoding: a window of guesses refined by each verify pass (fixed-point iteration)"
    Options = JacobiOptions

    structure = Structure.CHAIN
    drafts_by_chance = True  # each refreshed guess is conditioned on a rejected one (docs/methods/jacobi.md)

    def plan(self) -> None:
        o = self.opts
        cap = self.ctx.budget - 1
        self.k = cap if o.window is None else min(o.window, cap)
        # The chain template never changes: one parents list shared by every draft.
        self.parents = list(range(-1, self.k - 1))

    def setup(self) -> None:
        self.filler = GuessFiller(self.opts.init, pad_token_id(self.ctx.tokenizer), self.ctx.seed)

    def params(self) -> dict:
        return {"structure": self.structure.value, "window": self.k, "init": self.opts.init}

    def reset(self, prompt_ids: list[int]) -> None:
        self.filler.reset(prompt_ids)
        self.guess = self.filler.fill(self.k, list(prompt_ids))

    def propose(self, state: DecodeState) -> Draft:
        if self.k == 0:
            return Draft()
        return Draft(tokens=self.guess, parents=self.parents)

    def observe(self, result: VerifyResult) -> None:
        if self.k == 0:
            return
        preds = result.preds
        if preds is None:  # sampling: the iteration still follows the target's argmax
            preds = result.logits.argmax(dim=-1).tolist()
        k = len(result.accepted)
        nxt = preds[k + 1:self.k + 1]
        if k:
            nxt = nxt + self.filler.fill(k, result.new_tokens + nxt if self.filler.mode == "ahead" else nxt)
        self.guess = nxt
