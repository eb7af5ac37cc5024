"""Batch size N: N sequences decoded together, one target forward per step over all of them.

Every sequence has its own drafter (one instance per sequence, so no drafting state is shared),
its own draft within the block complexity, its own positions, tree mask and KV length:

    1. prefill each prompt on its own, exactly as `Decoder` does (batch size 1: no padded prompt
       rows, the same arithmetic), and copy its keys/values into its row of the batch cache so
       that every prompt ends at the same slot (engine/cache.py: `BatchKVCache`);
    2. step until every sequence has finished:
       a. each live sequence's drafter proposes a tree within the budget;
       b. one forward over every live sequence's root + tree, shorter ones padded to the longest
          (`tree.batch_tree_inputs`: padding rows see only themselves, no real row sees them);
       c. each sequence's verdict from its own rows' logits (and its own sampling generator);
       d. the cache keeps each sequence's root and accepted path, packed after its own tokens;
       e. each drafter observes its result;
       f. a sequence that reached EOS, its cap or its drafter's `finished()` leaves the batch: its
          cache row is overwritten by the last live row; no other sequence's rows, positions or
          mask change, so nothing it did alters their tokens;
    3. per sequence as in `Decoder`: the output cut at EOS and the cap; a lossy drafter's
       epilogue runs after the batch on that sequence's own cache (extracted as batch size 1).

What a row of the batch costs: the target processes `N x (1 + longest draft)` tokens per step,
padding included; `Generation.budget_used` records each sequence's own block (1 + its draft).
Clock: `prefill_time` is the time until decoding starts (every prompt's prefill), `wall_time`
runs from the batch's start to the sequence's finish; per step a sequence's drafting time is its
own drafter's (propose + observe), its verify time the shared forward's, and its overhead the
rest of the step (the other sequences' drafting and the batch's bookkeeping).

Whether batched arithmetic changes a sequence's tokens against batch size 1 is not assumed: the
tests and reports measure it (cross-batch agreement).
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import torch

from specbench_cli.engine.cache import BatchKVCache, KVCache
from specbench_cli.engine.draft import Draft, batch_tree_inputs
from specbench_cli.engine.drafter import DecodeState, Drafter, VerifyResult
from specbench_cli.engine.loop import BudgetExceeded, Decoder, Generation, _sync


class BatchDecoder(Decoder):
    """Runs N drafters (one per sequence) against one target model, one forward per step."""

    def _batch_forward(self, cache: BatchKVCache, roots: list[int], drafts: list[Draft],
                       want_hidden: bool | tuple[int, ...]):
        """One forward over every live row's root + draft, padded to the longest.

        Returns (`[sum(n_b + 1), V]` logits of the real rows, sequence by sequence; `[B, q, H']`
        hidden states (H' = H, or the chosen layers' inputs concatenated) or None; the clock
        reading just before the model ran)."""
        past = cache.length
        q = 1 + max(len(d) for d in drafts)
        rows = [[root] + d.tokens + [root] * (q - 1 - len(d)) for root, d in zip(roots, drafts)]
        ids = torch.tensor(rows, dtype=torch.long, device=self.device)
        mask, pos = batch_tree_inputs([d.parents for d in drafts], cache.starts, cache.ends, past, q,
                                      self.dtype, self.device)
        kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": pos, "past_key_values": cache.hf,
                                  "use_cache": True}
        if any(d.embeds for d in drafts):
            emb = self.embed(ids)
            for b, d in enumerate(drafts):
                for node, vec in (d.embeds or {}).items():
                    emb[b, node + 1] = vec.to(emb.dtype)
            kwargs["inputs_embeds"] = emb
        else:
            kwargs["input_ids"] = ids
        t_model = time.perf_counter()
        if isinstance(want_hidden, tuple):
            out = self.model.get_decoder()(**kwargs, output_hidden_states=True)
            hidden = out.last_hidden_state
            feats = torch.cat([out.hidden_states[i] for i in want_hidden], dim=-1)
        else:
            hidden = self.model.get_decoder()(**kwargs).last_hidden_state
            feats = hidden if want_hidden else None
        # the output head (the largest matrix of a small model) on the real rows only, as one block
        real = torch.cat([torch.arange(b * q, b * q + 1 + len(d)) for b, d in enumerate(drafts)]).to(self.device)
        flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, real)
        logits = self.model.get_output_embeddings()(flat.unsqueeze(0))[0]
        return logits, feats, t_model

    # -- the loop -------------------------------------------------------------------------
    @torch.inference_mode()
    def generate_batch(self, drafters: Sequence[Drafter], prompts: Sequence[list[int]],
                       max_new_tokens: Sequence[int], budget: int,
                       generators: Optional[Sequence[Optional[torch.Generator]]] = None) -> list[Generation]:
        """Decode every prompt with its own drafter (`drafters[i]` for `prompts[i]`, distinct
        objects) and cap, at most `budget` tokens per sequence per forward; one Generation each."""
        n = len(prompts)
        if not n or len(drafters) != n or len(max_new_tokens) != n:
            raise ValueError("generate_batch needs one drafter and one cap per prompt, and at least one prompt")
        if len({id(d) for d in drafters}) != n:
            raise ValueError("every sequence needs its own drafter instance (drafting state is per sequence)")
        if budget < 1:
            raise ValueError("block complexity must be at least 1")
        gens = list(generators) if generators is not None else [None] * n
        want_hidden = drafters[0].needs_hidden_states
        if want_hidden and getattr(drafters[0], "hidden_layers", None):
            want_hidden = tuple(drafters[0].hidden_layers)
        out = [Generation(prompt_tokens=len(p)) for p in prompts]
        clock = time.perf_counter
        _sync(self.device)
        t_start = clock()

        # 1. prefill, one prompt at a time, into the batch cache (every prompt ending at slot P)
        longest = max(len(p) for p in prompts)
        cache = BatchKVCache(n, longest + max(max_new_tokens) + budget + 1)
        seqs, produced, fresh = [], [], []
        for b, (drafter, prompt) in enumerate(zip(drafters, prompts)):
            drafter.reset(list(prompt))
            single = KVCache()
            ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
            logits, hidden = self._run({"input_ids": ids, "past_key_values": single.hf, "use_cache": True},
                                       want_hidden, last_only=True)
            first = self._choose(Draft(), logits[-1:], gens[b]).new_tokens[0]
            seqs.append(list(prompt) + [first])
            produced.append([first])
            fresh.append(hidden)
            cache.load_row(b, single, longest)
            del single
        t_now = clock()
        for g in out:
            g.prefill_time = t_now - t_start
        finished = [getattr(d, "finished", None) or (lambda: False) for d in drafters]

        def done(b: int) -> bool:
            return len(produced[b]) >= max_new_tokens[b] or produced[b][-1] in self.eos_ids or finished[b]()

        live = list(range(n))  # live[r]: the sequence in cache row r
        epilogues: dict[int, tuple[KVCache, Any]] = {}
        ended = [0.0] * n

        def leave(rows: list[int]) -> None:
            if not rows:
                return
            _sync(self.device)
            when = clock()
            for r in sorted(rows, reverse=True):  # the last row moves into r: drop from the end
                b = live[r]
                out_ids, epi = self._cut(drafters[b], produced[b], max_new_tokens[b])
                out[b].output_ids = out_ids
                if epi is not None:
                    epilogues[b] = (cache.extract(r), epi)
                ended[b] = when
                cache.drop(r)
                live[r] = live[-1]
                live.pop()

        leave([r for r, b in enumerate(live) if done(b)])

        # 2. decode
        while live:
            t0 = clock()
            states, drafts, own = [], [], []
            for b in live:
                ts = clock()
                g = out[b]
                state = DecodeState(ids=seqs[b], prompt_len=len(prompts[b]), budget=budget,
                                    remaining=max_new_tokens[b] - len(produced[b]), step=g.steps, hidden=fresh[b])
                draft = drafters[b].propose(state)                                         # 2a
                if 1 + len(draft) > budget:
                    raise BudgetExceeded(f"{drafters[b].name or type(drafters[b]).__name__} proposed {len(draft)} "
                                         f"tokens at block complexity {budget} (at most {budget - 1})")
                states.append(state)
                drafts.append(draft)
                own.append(clock() - ts)
            past = cache.length
            logits, hidden, t_model = self._batch_forward(cache, [seqs[b][-1] for b in live], drafts,
                                                          want_hidden)                     # 2b
            verdicts, parts, start = [], [], 0
            for r, b in enumerate(live):                                                   # 2c
                rows = 1 + len(drafts[r])
                part = logits[start:start + rows]
                start += rows
                parts.append(part)
                verdicts.append(self._choose(drafts[r], part, gens[b]))
            t2 = clock()
            cache.keep(past, [[0] + [a + 1 for a in v.accepted] for v in verdicts])          # 2d
            results = []
            for r, b in enumerate(live):
                v = verdicts[r]
                seqs[b].extend(v.new_tokens)
                produced[b].extend(v.new_tokens)
                if hidden is not None:
                    fresh[b] = hidden[r, [0] + [a + 1 for a in v.accepted]]
                results.append(VerifyResult(drafts[r], v.accepted, v.new_tokens, parts[r], fresh[b], v.preds,
                                            states[r]))
            for r, b in enumerate(live):                                                   # 2e
                ts = clock()
                drafters[b].observe(results[r])
                own[r] += clock() - ts
            t4 = clock()
            verifying = t2 - t_model
            for r, b in enumerate(live):
                g, d = out[b], drafts[r]
                g.accept_lengths.append(len(verdicts[r].new_tokens))
                g.draft_sizes.append(d.n_acceptable())
                g.budget_used.append(1 + len(d))
                g.step_draft_ms.append(round(1000 * own[r], 3))
                g.step_verify_ms.append(round(1000 * verifying, 3))
                g.draft_time += own[r]
                g.verify_time += verifying
                g.overhead_time += (t4 - t0) - own[r] - verifying
            leave([r for r, b in enumerate(live) if done(b)])                     # 2f

        # 3. lossy epilogues, each on its own sequence's cache, after the batch
        _sync(self.device)
        for b, g in enumerate(out):
            extra = 0.0
            if b in epilogues:
                single, epi = epilogues[b]
                ts = clock()
                g.output_ids = self._epilogue(single, list(prompts[b]), g.output_ids, epi, gens[b], g)
                _sync(self.device)
                extra = clock() - ts
            self._stats(drafters[b], epilogues.get(b, (None, None))[1], g)
            g.wall_time = ended[b] - t_start + extra
        return out
