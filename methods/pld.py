"""Prompt lookup decoding (PLD): copy what followed the last occurrence of the current suffix.

Spec-Bench's defaults: match the longest suffix n-gram from `max_ngram` (3) down to
`min_ngram` (1) and draft up to 10 tokens. Unlike Spec-Bench's leftmost scan, the most
recent earlier occurrence wins: in generated text the latest context is the best predictor.

The search is an incremental index, `n -> {n-gram: start of its most recent continuation}`,
updated with the tokens added since the last step, so a step costs O(new tokens), not
O(sequence length).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt


@dataclass
class PLDOptions:
    max_ngram: int = opt(3, lo=1, hi=64)
    min_ngram: int = opt(1, lo=1, hi=64)
    num_pred_tokens: Optional[int] = opt(None, lo=1, hi=MAX_BUDGET)  # None: min(10, block complexity - 1)


class NgramIndex:
    """Most recent continuation of every n-gram (n in [min_n, max_n]) of a growing sequence."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tables: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(min_n, max_n + 1)}
        self.done = 0  # positions j < done have been registered as continuations
        self.matched = 0  # the n of the last successful lookup (0: none)

    def update(self, ids: list[int]) -> None:
        """Register every position j (1 <= j < len(ids)) as the continuation of the n-grams ending at j-1."""
        for j in range(max(self.done, 1), len(ids)):
            for n, table in self.tables.items():
                if j >= n:
                    table[tuple(ids[j - n:j])] = j
        self.done = len(ids)

    def lookup(self, ids: list[int], k: int) -> list[int]:
        """Up to `k` tokens that followed the most recent earlier occurrence of the longest matching suffix."""
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(ids) < n:
                continue
            start = self.tables[n].get(tuple(ids[-n:]))
            if start is not None:
                self.matched = n
                return ids[start:start + k]
        self.matched = 0
        return []


class PromptLookup(Method):
    name = "pld"
    summary = "prompt lookup: copy the continuation of the latest matching n-gram (Spec-Bench defaults)"
    structure = Structure.CHAIN
    adaptive_budget = True  # plain drafts; observe reads result.draft
    Options = PLDOptions

    def plan(self) -> None:
        o = self.opts
        if o.min_ngram > o.max_ngram:  # each is bounded by its declaration; their order is checked here
            raise UsageError(f"pld needs 1 <= min_ngram <= max_ngram (got {o.min_ngram}, {o.max_ngram})")
        cap = self.ctx.budget - 1
        self.k = min(10, cap) if o.num_pred_tokens is None else min(o.num_pred_tokens, cap)

    def params(self) -> dict:
        return {"max_ngram": self.opts.max_ngram, "min_ngram": self.opts.min_ngram, "num_pred_tokens": self.k}

    def reset(self, prompt_ids: list[int]) -> None:
        self.index = NgramIndex(self.opts.min_ngram, self.opts.max_ngram)

    def propose(self, state: DecodeState) -> Draft:
        if self.k <= 0:
            return Draft()
        self.index.update(state.ids)
        chain = self.index.lookup(state.ids, min(self.k, state.remaining))
        # signal class for an adaptive budget: the matched n-gram's length
        return Draft.chain(chain, signal=[self.index.matched] * len(chain))
