"""REST (He et al. 2023, "REST: Retrieval-Based Speculative Decoding"): draft from what followed
the current context in a datastore of text, with no draft model.

Each step takes the longest suffix of the sequence (from `max_span` tokens down to `min_span`)
that occurs in the datastore, retrieves up to `k` of its continuations of `long` tokens through
`draftretriever` (the authors' suffix-array library; `pip install 'specbench-cli[rest]'`),
keeps the most frequent prefixes as a trie of at most BC - 1 nodes, and hands the trie to the
target to verify: lossless. The datastore is built once with `specbench datastore build`
(methods/retrieval/datastore.py) and must come from the target's tokenizer.

Choices where the paper is silent are in docs/methods/rest.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method
from specbench_cli.methods.retrieval import datastore as store
from specbench_cli.options import opt

PAD = -2  # draftretriever pads retrieved paths with -2


@dataclass
class RESTOptions:
    datastore: Optional[str] = None       # folder from `specbench datastore build`
    max_span: int = opt(16, lo=1, hi=64)  # longest context suffix tried (REST: 16)
    # shortest one (REST tries 16 down to 2); draftretriever 0.1.1 aborts the process on a 1-token query
    min_span: int = opt(2, lo=2, hi=64)
    k: int = opt(5000, lo=1, hi=100_000)  # continuations retrieved at most (REST: 5000)
    long: int = opt(10, lo=1, hi=64)      # tokens per continuation (REST: 10)


def trie_from_paths(paths: list[list[int]], max_nodes: int) -> Draft:
    """A draft tree holding every prefix of `paths` (pads dropped), shallow prefixes first and in
    token order within a depth, cut at `max_nodes` nodes (a cut keeps every node's parent)."""
    prefixes = sorted({tuple(p[:i]) for p in paths for i in range(1, len(p) + 1)}, key=lambda t: (len(t), t))
    prefixes = prefixes[:max(0, max_nodes)]
    index = {pre: i for i, pre in enumerate(prefixes)}
    return Draft(tokens=[pre[-1] for pre in prefixes],
                 parents=[index[pre[:-1]] if len(pre) > 1 else -1 for pre in prefixes])


class REST(Method):
    name = "rest"
    summary = "REST: retrieve continuations of the context from a datastore (draftretriever) as a draft trie"
    needs_training = True  # needs a datastore built for the target: not in the default method list
    requires = ("datastore",)
    structure = Structure.TREE
    adaptive_budget = True  # plain drafts; observe reads result.draft
    Options = RESTOptions

    def plan(self) -> None:
        o = self.opts
        if not o.datastore:
            raise UsageError("method rest needs a datastore: -o rest.datastore=DIR (build one with "
                             "`specbench datastore build --from FILE --out DIR --model TARGET`)")
        if o.min_span > o.max_span:
            raise UsageError(f"rest needs min_span <= max_span (got {o.min_span}, {o.max_span})")
        store.require_library()
        self.folder, self.meta = store.open_for("rest", o.datastore, self.ctx.target_ref, index=True)
        store.check_index(self.folder, self.meta)  # the library aborts the process on a damaged one
        self.nodes = max(0, self.ctx.budget - 1)

    def setup(self) -> None:
        if self.ctx.tokenizer is not None:
            store.check_tokenizer(self.meta, self.folder, self.ctx.tokenizer)
        self.reader = store.require_library().Reader(str(self.folder / store.INDEX))

    def params(self) -> dict:
        o = self.opts
        return {"datastore": str(self.folder), "entries": self.meta.get("entries"), "max_span": o.max_span,
                "min_span": o.min_span, "k": o.k, "long": o.long, "nodes": self.nodes}

    def label(self) -> str:
        return f"rest({self.folder.name})"

    def _search(self, context: list[int], long: int) -> list[list[int]]:
        # draftretriever 0.1.1 aborts the whole process (a Rust panic) when its cut leaves no path,
        # which happens when every kept prefix is longer than `choices`: so never `long > choices`
        # it also aborts on some queries at choices=1, so ask for at least 2 (the trie is cut to BC - 1)
        choices = max(2, self.nodes)
        while choices >= 2:
            long = min(long, choices)
            try:
                paths = self.reader.search(context, k=self.opts.k, choices=choices, long=long)[0]
            except ValueError:  # the library could not cut its trie to `choices`: ask for fewer
                choices //= 2
                continue
            return [[t for t in p if t != PAD] for p in paths]
        return []

    def propose(self, state: DecodeState) -> Draft:
        if self.nodes <= 0:
            return Draft()
        ids = state.ids
        long = max(1, min(self.opts.long, self.nodes, state.remaining))
        for span in range(min(self.opts.max_span, len(ids)), self.opts.min_span - 1, -1):
            paths = [p for p in self._search(list(ids[-span:]), long) if p]
            if paths:
                return trie_from_paths(paths, self.nodes)
        return Draft()
