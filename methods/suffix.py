"""SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975; reference code: Snowflake's
ArcticInference): speculation trees from suffix trees over the prompt, the output so far and
the answers of earlier requests, with no draft model.

Two suffix trees (methods/retrieval/suffix_tree.py, the reference's trees token for token):
- the request's own tree over its prompt and every token generated since;
- a global tree over this method's answers to the earlier turns of the run (`remember`), at most
  `max_cached_requests` of them, the oldest evicted first. The runner makes it empty at the start
  of every pass over the questions (`forget`), so it never holds an answer to the question being
  decoded from another pass, nor anything not yet produced; on `--resume` it is rebuilt from
  the finished rows in run order, so a resumed run drafts exactly as an uninterrupted one.

Each step both trees match the longest suffixes of the last `max_tree_depth` tokens and grow a
speculation tree best-first by the frequency-based probability of each continuation, stop
below `min_token_prob`, and cap it at `max_spec_factor` x match length (+ `max_spec_offset`)
nodes and at BC - 1; the higher score (expected accepted tokens: the sum of the nodes'
probabilities) wins, a tie going to the request's own tree. The target verifies every draft:
lossless.

Hybrid (`-o suffix.fallback=eagle|eagle3|hydra|medusa|pld`): each step the suffix tree drafts
when its score beats the fallback's expected acceptance, the mean number of draft tokens the
target accepted on the fallback's own steps of this request (before its first step, 1, counted as
one step); otherwise the fallback drafts. As ArcticInference's hybrid and SAM-decoding do,
the model drafter is skipped when retrieval looks better; a skipped head drafter still takes
the step's hidden states (methods/core/fallback.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.methods.core.fallback import HEAD_FALLBACKS, Fallback, shown_options
from specbench_cli.methods.core.method import Method
from specbench_cli.methods.retrieval.suffix_tree import SuffixDraft, SuffixTree
from specbench_cli.options import opt

FALLBACKS = ("none", *HEAD_FALLBACKS, "pld", "recycling")


@dataclass
class SuffixOptions:
    # the reference's names (SuffixDecodingCache / speculate) and defaults
    max_tree_depth: int = opt(64, lo=1, hi=512)          # longest suffix stored and matched (tokens)
    max_spec_factor: float = opt(1.0, lo=0.0, hi=64.0)   # draft at most factor x match length (+ offset) tokens
    max_spec_offset: float = opt(0.0, lo=-64.0, hi=64.0)
    min_token_prob: float = opt(0.1, lo=0.0, hi=1.0)     # no draft token below this estimated probability
    max_cached_requests: int = opt(100_000, lo=0, hi=1_000_000)  # answers in the global tree; 0: none
    use_tree_spec: bool = True   # a speculation tree (the paper); false: the single likeliest path
    fallback: str = opt("none", choices=FALLBACKS)  # a model drafter for the steps the suffix trees lose
    heads: Optional[str] = None  # heads folder of an eagle / eagle3 / hydra / medusa fallback
    # a corpus (`specbench datastore build`) the global tree holds from the start, never evicted
    datastore: Optional[str] = None


class SuffixDecoding(Method):
    name = "suffix"
    summary = "SuffixDecoding: suffix trees over prompt + output and earlier answers, frequency-scored speculation tree"
    structure = Structure.TREE
    adaptive_budget = True  # plain drafts; a fallback must allow it too (plan)
    Options = SuffixOptions

    def plan(self) -> None:
        o = self.opts
        self.fallback = None if o.fallback == "none" and not o.heads else Fallback(self, o.fallback, o.heads)
        if self.fallback is not None:
            self.adaptive_budget = self.fallback.method.adaptive_budget
        tree = o.use_tree_spec or (self.fallback is not None and self.fallback.method.structure == Structure.TREE)
        self.structure = Structure.TREE if tree else Structure.CHAIN
        self.corpus: list[list[int]] = []
        self.ready = False  # bound: the corpus is in the global tree from here on
        self.folder = self.meta = None
        if o.datastore:
            from specbench_cli.methods.retrieval import datastore as store

            self.folder, self.meta = store.open_for("suffix", o.datastore, self.ctx.target_ref, index=False)
            self.corpus = store.load_sequences(self.folder, self.meta, "suffix")  # checked before any model loads
        self.forget()  # the corpus goes into the global tree at setup (and at every later forget)
        self.counts: dict[str, int] = {}

    def setup(self) -> None:
        if self.fallback is not None:
            self.fallback.bind()
        if self.folder is not None:
            from specbench_cli.methods.retrieval import datastore as store

            if self.ctx.tokenizer is not None:
                store.check_tokenizer(self.meta, self.folder, self.ctx.tokenizer)
            self.ready = True
            self.forget()

    def shown_options(self) -> dict:
        shown = shown_options(self, self.fallback)
        if "datastore" in shown:
            shown["datastore"] = self.folder.name
        return shown

    def params(self) -> dict:
        return {**{k: v for k, v in super().params().items() if k not in ("heads", "datastore")},
                **({"fallback_params": self.fallback.method.params()} if self.fallback else {}),
                **({"datastore": str(self.folder), "datastore_entries": self.meta.get("entries"),
                    "datastore_tokens": self.meta.get("tokens")} if self.folder is not None else {})}

    # -- the global tree: this method's earlier answers ------------------------------------------
    def forget(self) -> None:
        """An empty global tree but for the corpus's texts (sequence ids -1, -2, ...: never evicted)."""
        self.global_tree = SuffixTree(self.opts.max_tree_depth)
        for i, seq in enumerate(self.corpus if getattr(self, "ready", False) else ()):
            self.global_tree.extend(-1 - i, seq)
        self.cached: deque[int] = deque()   # sequence ids of the run's answers in the global tree, oldest first
        self.next_seq = 0
        if getattr(self, "fallback", None) is not None:
            self.fallback.forget()

    def remember(self, output_ids: list[int]) -> None:
        """Add an answer to the global tree, evicting the oldest beyond `max_cached_requests`
        first (the reference's order: a request's slot is taken, then its tokens come in)."""
        if self.opts.max_cached_requests == 0:
            return
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        self.cached.append(seq)
        while len(self.cached) > self.opts.max_cached_requests:
            self.global_tree.remove(self.cached.popleft())
        self.global_tree.extend(seq, output_ids)

    # -- decoding -----------------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.local = SuffixTree(self.opts.max_tree_depth)
        self.local.extend(0, prompt_ids)
        self.counts = {"local": 0, "global": 0, "none": 0, "fallback": 0}
        self.held = len(self.cached)
        self.fallback_steps = self.fallback_accepted = 0
        self.last = ""
        if self.fallback is not None:
            self.fallback.reset(prompt_ids)

    def speculate(self, ids: list[int], n: int) -> tuple[SuffixDraft, str]:
        """The better draft of the two trees for the sequence `ids`, at most `n` nodes, and which
        tree gave it ("local", "global", or "none" when neither continues the text)."""
        o = self.opts
        context = ids[-o.max_tree_depth:]
        args = (n, o.max_spec_factor, o.max_spec_offset, o.min_token_prob, o.use_tree_spec)
        local = self.local.speculate(context, *args)
        other = self.global_tree.speculate(context, *args) if self.cached or self.ready and self.corpus else SuffixDraft()
        best, where = (local, "local") if local.score >= other.score else (other, "global")
        return best, (where if best.token_ids else "none")

    def propose(self, state: DecodeState) -> Draft:
        local_len = len(self.local.seqs.get(0, ()))
        self.local.extend(0, state.ids[local_len:])
        n = min(state.budget - 1, state.remaining)
        if n <= 0:
            return Draft()
        draft, where = self.speculate(state.ids, n)
        expected = (self.fallback_accepted + 1) / (self.fallback_steps + 1)
        if self.fallback is not None and draft.score <= expected:
            self.last = "fallback"
            self.counts["fallback"] += 1
            return self.fallback.propose(state)
        self.last = where
        self.counts[where] += 1
        if self.fallback is not None:
            self.fallback.skip(state)
        # signal class for an adaptive budget: the node's estimated probability in tenths, apart
        # for the two trees (and from a fallback's classes)
        base = 100 if where == "local" else 120
        return Draft(tokens=list(draft.token_ids), parents=list(draft.parents),
                     signal=[base + min(int(10 * p), 10) for p in draft.probs])

    def observe(self, result: VerifyResult) -> None:
        if self.fallback is not None:
            self.fallback.observe(result)
            if self.last == "fallback":
                self.fallback_steps += 1
                self.fallback_accepted += len(result.accepted)

    def stats(self) -> dict:
        """How many answers the global tree held, and which drafter each step used."""
        out = {"global_requests": self.held, **{f"steps_{k}": v for k, v in self.counts.items()}}
        if self.fallback is None:
            out.pop("steps_fallback", None)
        return out
