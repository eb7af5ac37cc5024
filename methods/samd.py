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

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.fallback import HEAD_FALLBACKS, Fallback, shown_options
from specbench_cli.methods.core.merge import merge, path_scores
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

    def step(self, s: int, n: int, token: int) -> tuple[int, int]:
        """A matcher at state `s` holding `n` tokens, moved over `token`: the state and length of
        the longest suffix of (its text + token) that the automaton holds."""
        while s != 0 and token not in self.next[s]:
            s = self.link[s]
            n = self.length[s]
        if token in self.next[s]:
            return self.next[s][token], n + 1
        return 0, 0

    def add(self, token: int) -> None:
        """Move the matcher over `token` against the text before it, then extend with it."""
        self.state, self.match = self.step(self.state, self.match, token)
        self.text.append(token)
        self._extend(token)

    def extend(self, token: int) -> None:
        """Extend with `token` without moving the matcher (building a static automaton)."""
        self.text.append(token)
        self._extend(token)

    def continuation(self, k: int, state: Optional[int] = None) -> list[int]:
        """Up to k tokens that followed the first earlier occurrence of the matched suffix (of
        the matcher's, or of a matcher at `state`), cut before a separator (a negative token)."""
        state = self.state if state is None else state
        if state == 0:
            return []
        start = self.first_end[state] + 1
        out = self.text[start:start + k]
        for i, t in enumerate(out):
            if t < 0:
                return out[:i]
        return out


SEPARATOR = -1  # between a corpus's texts: no text holds it, so no match crosses it


def corpus_automaton(sequences) -> SuffixAutomaton:
    """The static automaton of a corpus: every sequence, each followed by SEPARATOR."""
    sam = SuffixAutomaton()
    for seq in sequences:
        for t in seq:
            sam.extend(int(t))
        sam.extend(SEPARATOR)
    return sam


@dataclass
class SAMDOptions:
    threshold: int = opt(2, lo=1, hi=1024)  # shortest match (tokens) whose continuation is drafted
    fallback: str = opt("recycling", choices=FALLBACKS)  # the drafter for short matches (eagle = SAMD[EAGLE2])
    heads: Optional[str] = None  # heads folder of an eagle / eagle3 / hydra / medusa fallback
    # a static automaton over a corpus (`specbench datastore build`), matched beside the dynamic one
    datastore: Optional[str] = None
    # the static match counts this many tokens shorter when the two automata compete (the paper's
    # len_bias): the request's own text is the likelier continuation at equal length
    static_bias: int = opt(4, lo=0, hi=1024)
    # one tree per step: the automaton's chain (a match of any length) and the fallback's tree,
    # merged and cut to the budget by each node's estimated chance (methods/core/merge.py)
    merge: bool = False


# The chance that a chain token is accepted given its parent was, by the match length (1, 2-3,
# 4-7, 8-15, 16+) and depth (the last value for deeper ones), rounded: measured on SmolLM2-135M's
# greedy answers to 120 Spec-Bench questions that no study reports (the `time-accounting` study's
# corpus; the chain of the request's own automaton at every position). Only the merge's order
# uses them; the adaptive budget learns its own rates.
CHAIN_PRIOR = ((0.21, 0.59, 0.70, 0.70, 0.72, 0.76), (0.57, 0.67, 0.72, 0.75, 0.76, 0.79),
               (0.72, 0.76, 0.79, 0.82), (0.85, 0.86, 0.88), (0.97, 0.95))


def chain_prior(match: int) -> tuple[float, ...]:
    return CHAIN_PRIOR[min(max(match, 1).bit_length() - 1, len(CHAIN_PRIOR) - 1)]


_STATIC: dict = {}  # the last corpus's automaton, by its sequences' identity: built once per process


def static_automaton(sequences: list[list[int]]) -> SuffixAutomaton:
    if id(sequences) not in _STATIC:
        _STATIC.clear()  # one corpus at a time: an automaton holds about 2 states per token
        _STATIC[id(sequences)] = (sequences, corpus_automaton(sequences))  # the list kept: its id stays unique
    return _STATIC[id(sequences)][1]


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
        self.counts = {"sam": 0, "static": 0, "fallback": 0, "merged": 0}
        self.folder = self.meta = self.static = None
        if o.merge and (self.fallback is None or not hasattr(self.fallback.method, "scores")):
            raise UsageError("samd.merge=true merges the chain with the fallback's tree: it needs samd.fallback=recycling")
        if o.datastore:
            from specbench_cli.methods.retrieval import datastore as store

            self.folder, self.meta = store.open_for("samd", o.datastore, self.ctx.target_ref, index=False)
            self.corpus = store.load_sequences(self.folder, self.meta, "samd")  # checked before any model loads

    def setup(self) -> None:
        if self.fallback is not None:
            self.fallback.bind()
        if self.folder is not None:
            from specbench_cli.methods.retrieval import datastore as store

            if self.ctx.tokenizer is not None:
                store.check_tokenizer(self.meta, self.folder, self.ctx.tokenizer)
            self.static = static_automaton(self.corpus)

    def shown_options(self) -> dict:
        shown = shown_options(self, self.fallback)
        if "datastore" in shown:
            shown["datastore"] = self.folder.name
        return shown

    def params(self) -> dict:
        return {"threshold": self.opts.threshold, "fallback": self.opts.fallback,
                **({"fallback_params": self.fallback.method.params()} if self.fallback else {}),
                **({"datastore": str(self.folder), "datastore_entries": self.meta.get("entries"),
                    "datastore_tokens": self.meta.get("tokens"), "static_bias": self.opts.static_bias}
                   if self.folder is not None else {})}

    def forget(self) -> None:
        if self.fallback is not None:
            self.fallback.forget()

    def reset(self, prompt_ids: list[int]) -> None:
        self.sam = SuffixAutomaton()
        self.at = (0, 0)  # the static automaton's matcher: its state and matched length
        self.counts = {"sam": 0, "static": 0, "fallback": 0, "merged": 0}
        if self.fallback is not None:
            self.fallback.reset(prompt_ids)

    def propose(self, state: DecodeState) -> Draft:
        static = self.static
        for token in state.ids[len(self.sam.text):]:
            self.sam.add(token)
            if static is not None:
                self.at = static.step(*self.at, token)
        n = min(state.budget - 1, state.remaining)
        if n <= 0:
            return Draft()
        # the longer match (the corpus's counted static_bias shorter) drafts; the other one when the
        # longer one's text ends there
        found = [(self.sam.match, "sam")]
        if static is not None:
            found.append((self.at[1] - self.opts.static_bias, "static"))
        chain: list[int] = []
        least = 1 if self.opts.merge else self.opts.threshold
        for match, kind in sorted(found, key=lambda f: -f[0]):  # stable: the request's own on a tie
            if match >= least:
                chain = self.sam.continuation(n) if kind == "sam" else static.continuation(n, self.at[0])
            if chain:
                break
        if self.opts.merge:
            return self._merged(state, n, chain, match, kind)
        if chain:
            self.counts[kind] += 1
            if self.fallback is not None:
                self.fallback.skip(state)
            # signal class for an adaptive budget: the match length, in powers of two (100 + its
            # bit length for the request's own automaton, 120 + for the corpus's; apart from the
            # fallback's classes)
            base = 100 if kind == "sam" else 120
            return Draft.chain(chain, signal=[base + min(match.bit_length(), 8)] * len(chain))
        if self.fallback is None:
            return Draft()
        self.counts["fallback"] += 1
        return self.fallback.propose(state)

    def _merged(self, state: DecodeState, n: int, chain: list[int], match: int, kind: str) -> Draft:
        """The chain (any match length) and the fallback's tree in one tree of at most n nodes."""
        tree = self.fallback.propose(state)
        parts = []
        if chain:
            prior = chain_prior(match)
            base = 100 if kind == "sam" else 120
            d = Draft.chain(chain, signal=[base + min(match.bit_length(), 8)] * len(chain))
            parts.append((d, path_scores(d, lambda i: prior[min(i, len(prior) - 1)])))
        if len(tree):
            parts.append((tree, self.fallback.method.scores(tree)))
        self.counts["merged" if len(parts) == 2 else kind if chain else "fallback"] += 1
        return merge(parts, n)

    def observe(self, result: VerifyResult) -> None:
        if self.fallback is not None:
            self.fallback.observe(result)

    def stats(self) -> dict:
        out = {"steps_sam": self.counts["sam"], "steps_fallback": self.counts["fallback"]}
        if self.static is not None:
            out["steps_static"] = self.counts["static"]
        if self.opts.merge:
            out["steps_merged"] = self.counts["merged"]
        return out
