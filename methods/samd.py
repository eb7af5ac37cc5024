"""SAM-decoding (Hu et al. 2024, "SAM Decoding: Speculative Decoding via Suffix Automaton"):
retrieve the draft from a suffix automaton of the prompt and everything generated so far, and
fall back to another drafter when the match is short.

The automaton grows by one state per token (amortised O(1)). A matcher follows the text through
it: after each token it holds the longest suffix of the text that also occurs *earlier* (the
automaton is extended only after the matcher has moved, so the match never is the suffix's own
occurrence). When that suffix is at least `threshold` tokens long, the draft is the chain of
tokens that followed its first occurrence (up to BC - 1); otherwise the fallback method drafts
(Spec-Bench's SAMD row uses EAGLE-2 there; `recycling` here by default, `none` for SAM alone,
or a head drafter: eagle, eagle3, hydra, medusa). The fallback (methods/core/fallback.py) sees every
step and every verification either way, so its own state (Token Recycling's matrix, a head's
KV cache) stays current. The target verifies every draft: lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.engine.draft import Draft
from specbench_cli.engine.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.fallback import HEAD_FALLBACKS, Fallback, shown_options
from specbench_cli.methods.core.method import Method
from specbench_cli.options import opt

FALLBACKS = ("recycling", "pld", *HEAD_FALLBACKS, "none")


class SuffixAutomaton:
    """Suffix automaton of a growing token sequence, with each state's first end position, and a
    matcher holding the longest suffix of the sequence that occurred before its last token."""

    def __init__(self) -> None:
        self.length = [0]
        self.link = [-1]
        self.next: list[dict[int, int]] = [{}]
        self.first_end = [-1]
        self.last = 0
        self.text: list[int] = []
        self.state, self.match = 0, 0  # the matcher: a state and the matched length

    def _add_state(self, length: int, link: int, nxt: dict[int, int], first_end: int) -> int:
        self.length.append(length)
        self.link.append(link)
        self.next.append(nxt)
        self.first_end.append(first_end)
        return len(self.length) - 1

    def _extend(self, token: int) -> None:
        pos = len(self.text) - 1  # the token is already in self.text
        cur = self._add_state(self.length[self.last] + 1, -1, {}, pos)
        p = self.last
        while p != -1 and token not in self.next[p]:
            self.next[p][token] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._add_state(self.length[p] + 1, self.link[q], dict(self.next[q]), self.first_end[q])
                while p != -1 and self.next[p].get(token) == q:
                    self.next[p][token] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def _advance(self, token: int) -> None:
        """Move the matcher over `token` against the text before it."""
        s, n = self.state, self.match
        while s != 0 and token not in self.next[s]:
            s = self.link[s]
            n = self.length[s]
        if token in self.next[s]:
            s, n = self.next[s][token], n + 1
        else:
            s, n = 0, 0
        self.state, self.match = s, n

    def add(self, token: int) -> None:
        self._advance(token)
        self.text.append(token)
        self._extend(token)

    def continuation(self, k: int) -> list[int]:
        """Up to k tokens that followed the first earlier occurrence of the matched suffix."""
        if self.match == 0:
            return []
        start = self.first_end[self.state] + 1
        return self.text[start:start + k]


@dataclass
class SAMDOptions:
    threshold: int = opt(2, lo=1, hi=1024)  # shortest match (tokens) whose continuation is drafted
    fallback: str = opt("recycling", choices=FALLBACKS)  # the drafter for short matches (eagle = SAMD[EAGLE2])
    heads: Optional[str] = None  # heads folder of an eagle / eagle3 / hydra / medusa fallback


class SAMDecoding(Method):
    name = "samd"
    summary = "SAM-decoding: suffix-automaton retrieval over prompt + output, Token Recycling when the match is short"
    structure = Structure.TREE  # a chain from the automaton, or the fallback's tree
    adaptive_budget = True  # plain drafts; a fallback must allow it too (plan)
    Options = SAMDOptions

    def plan(self) -> None:
        o = self.opts
        if o.fallback == "none":
            if o.heads:
                raise UsageError("samd.heads is for a head fallback, not 'none'")
            self.fallback = None
            self.structure = Structure.CHAIN
        else:
            self.fallback = Fallback(self, o.fallback, o.heads)
            self.adaptive_budget = self.fallback.method.adaptive_budget
        self.counts = {"sam": 0, "fallback": 0}

    def setup(self) -> None:
        if self.fallback is not None:
            self.fallback.bind()

    def shown_options(self) -> dict:
        return shown_options(self, self.fallback)

    def params(self) -> dict:
        return {"threshold": self.opts.threshold, "fallback": self.opts.fallback,
                **({"fallback_params": self.fallback.method.params()} if self.fallback else {})}

    def reset(self, prompt_ids: list[int]) -> None:
        self.sam = SuffixAutomaton()
        self.counts = {"sam": 0, "fallback": 0}
        if self.fallback is not None:
            self.fallback.reset(prompt_ids)

    def propose(self, state: DecodeState) -> Draft:
        for token in state.ids[len(self.sam.text):]:
            self.sam.add(token)
        n = min(state.budget - 1, state.remaining)
        if n <= 0:
            return Draft()
        if self.sam.match >= self.opts.threshold:
            chain = self.sam.continuation(n)
            if chain:
                self.counts["sam"] += 1
                if self.fallback is not None:
                    self.fallback.skip(state)
                # signal class for an adaptive budget: the match length, in powers of two (100 + its
                # bit length, apart from the fallback's classes)
                return Draft.chain(chain, signal=[100 + min(self.sam.match.bit_length(), 8)] * len(chain))
        if self.fallback is None:
            return Draft()
        self.counts["fallback"] += 1
        return self.fallback.propose(state)

    def observe(self, result: VerifyResult) -> None:
        if self.fallback is not None:
            self.fallback.observe(result)

    def stats(self) -> dict:
        return {"steps_sam": self.counts["sam"], "steps_fallback": self.counts["fallback"]}
