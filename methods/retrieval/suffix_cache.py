"""SuffixDecoding's per-request cache (ArcticInference's `arctic_inference.suffix_decoding`
`cache.py`, `SuffixDecodingCache`, call for call): a global suffix tree over the responses of
earlier requests and one tree per active request over its prompt and response, drafting from
whichever of the two scores better. The trees themselves are `suffix_tree.py`; the reference,
and vLLM after it, keep the two apart the same way. `specbench`'s `suffix` method grows its own
two trees (methods/suffix.py); this cache is what the recorded reference programs replay
(benchmarks/suffix_peers.py, tests/methods/test_suffix_tree.py).
"""

from __future__ import annotations

from typing import Hashable, Sequence

from specbench_cli.methods.retrieval.suffix_tree import SuffixDraft, SuffixTree


class SuffixCache:
    """The reference's `SuffixDecodingCache`, call for call: a global tree over the responses of
    requests (at most `max_cached_requests`, the oldest evicted first; -1 = no limit, 0 = no
    global tree) and one tree per active request over its prompt and response."""

    def __init__(self, max_tree_depth: int = 64, max_cached_requests: int = -1) -> None:
        if max_cached_requests > 0x7FFFFFFF:
            raise ValueError("max_cached_requests must be at most 2^31")
        self.max_tree_depth = max_tree_depth
        self.max_cached_requests = max_cached_requests
        self.global_tree = SuffixTree(max_tree_depth)
        self.local_trees: dict[Hashable, SuffixTree] = {}
        self.req_to_seq: dict[Hashable, int] = {}
        self.seq_to_req: dict[int, Hashable] = {}
        self._next_seq_id = 0

    @property
    def cached_requests(self):
        return self.req_to_seq.keys()

    def start_request(self, req_id: Hashable, prompt: Sequence[int]) -> None:
        if req_id in self.local_trees:
            raise ValueError(f"Request '{req_id}' is already active")
        self.local_trees[req_id] = SuffixTree(self.max_tree_depth)
        self.local_trees[req_id].extend(0, prompt)
        if self.max_cached_requests != 0:
            if req_id in self.req_to_seq:
                self.evict_cached_response(req_id)
            self._new_seq_id(req_id)

    def stop_request(self, req_id: Hashable) -> None:
        if req_id not in self.local_trees:
            raise ValueError(f"Request '{req_id}' is not active")
        del self.local_trees[req_id]

    def add_active_response(self, req_id: Hashable, tokens: Sequence[int]) -> None:
        if req_id not in self.local_trees:
            raise ValueError(f"Request '{req_id}' is not active")
        self.local_trees[req_id].extend(0, tokens)
        if req_id in self.req_to_seq:
            self.global_tree.extend(self.req_to_seq[req_id], tokens)

    def evict_cached_response(self, req_id: Hashable) -> None:
        if req_id not in self.req_to_seq:
            raise ValueError(f"Request '{req_id}' is not cached")
        seq_id = self.req_to_seq.pop(req_id)
        del self.seq_to_req[seq_id]
        self.global_tree.remove(seq_id)

    def speculate(self, req_id: Hashable, context: Sequence[int], max_spec_tokens: int,
                  max_spec_factor: float = 1.0, max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                  use_tree_spec: bool = False) -> SuffixDraft:
        """The better of the request's own tree and the global tree (a tie keeps the request's)."""
        if req_id not in self.local_trees:
            raise ValueError(f"Request '{req_id}' is not active")
        context = list(context)[-self.max_tree_depth:]
        args = (max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)
        local = self.local_trees[req_id].speculate(context, *args)
        other = self.global_tree.speculate(context, *args)
        return local if local.score >= other.score else other

    def _new_seq_id(self, req_id: Hashable) -> int:
        while True:
            seq_id = self._next_seq_id
            self._next_seq_id = (self._next_seq_id + 1) & 0x7FFFFFFF
            if seq_id not in self.seq_to_req or self.seq_to_req[seq_id] not in self.local_trees:
                break
        if seq_id in self.seq_to_req:  # wrapped around onto an inactive cached request
            del self.req_to_seq[self.seq_to_req.pop(seq_id)]
            self.global_tree.remove(seq_id)
        self.req_to_seq[req_id] = seq_id
        self.seq_to_req[seq_id] = req_id
        if self.max_cached_requests >= 0:
            while len(self.req_to_seq) > self.max_cached_requests:  # oldest first, never the new one
                victim = next(r for r, s in self.req_to_seq.items() if s != seq_id)
                self.evict_cached_response(victim)
        return seq_id
