"""Continuous batching: a running batch that sequences join and leave between steps.

`Decoder.generate_batch` decodes a static batch: every sequence is prefilled before the first
step and the batch only shrinks. A server's batch changes with its arrivals: a request that
arrives joins at the next step and leaves when it ends. `ContinuousBatch` is that batch, with the
same loop body as `generate_batch` (decoding/decoder.py's module doc, steps 1-4) cut at the points
where sequences may come and go; what admits them and when (a trace's send times, a fixed number
in flight) is the caller's (load/own_loop.py):

    join(key, drafter, prompt, cap, ...)   prefill the prompt on its own (`Target.join`) and add
                                           it as the batch's last row; its first token
    step()                                 one draft + verify step over every live sequence
                                           (steps 2a-2e) and the leaving of those that ended (2f)

Each returns what each sequence gained (`Emitted`: the tokens its answer keeps, and its
`Generation` once it has left). The tokens are those `generate_batch` would keep: cut at EOS
and at the cap, the same verdict rule, each sequence with its own drafter, generator and
adaptive budget. A lossy drafter's epilogue (fastcot) runs when its sequence leaves, on that
sequence's own keys and values, before the batch steps again. Step times are the caller's (it
reads its own clock around `join` and `step`); a `Generation` here holds the answer, its per-step
counts and the drafter's stats, no times.

The target must implement `Target.join` (`Target.can_join`); the keys/values layout of a batch
that rows joined at different times differs from a static batch's (rows start at different
slots), so whether batched arithmetic changes a sequence's tokens is measured by the tests, as
for static batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Optional

import torch

from specbench_cli.decoding.budget import AdaptiveBudget
from specbench_cli.decoding.decoder import BudgetExceeded, Decoder, Generation, _host_values, _path, _rows, _top, wants
from specbench_cli.decoding.drafter import DecodeState, Drafter, VerifyResult
from specbench_cli.decoding.target import Batch, TargetError


@dataclass
class Emitted:
    """What one sequence gained at a `join` or a `step`: `tokens`, the new tokens its answer
    keeps (cut at EOS and the cap: the streamed tokens), and `done`, its finished `Generation`
    when it left the batch (None while it is live)."""

    key: Hashable
    tokens: list[int]
    done: Optional[Generation] = None


@dataclass
class _Seq:
    key: Hashable
    drafter: Drafter
    prompt: list[int]
    cap: int
    generator: Optional[torch.Generator]
    policy: Optional[AdaptiveBudget]
    gen: Generation
    ids: list[int]
    produced: list[int]
    fresh: Any
    ended_eos: bool = False
    kept: int = 0  # tokens of `produced` already emitted


class ContinuousBatch:
    """A running batch (module doc) of one decoder's target, every sequence at block complexity
    `budget`; `want`: what every drafter asks the target for besides logits (`decoder.wants`),
    the same for all (one method per batch; None: what the first drafter to join asks for);
    `room`: tokens a row may need past its cap and one block (none for lossless methods)."""

    def __init__(self, decoder: Decoder, budget: int, want: bool | tuple[int, ...] | None = None,
                 room: int = 0) -> None:
        if budget < 1:
            raise ValueError("block complexity must be at least 1")
        if not decoder.target.can_join():
            raise TargetError(f"target '{decoder.target.name}' cannot add a sequence to a running batch "
                              "(continuous batching needs Target.join)")
        self.decoder = decoder
        self.target = decoder.target
        self.budget = budget
        self.want = want
        self.room = room
        self.batch: Optional[Batch] = None
        self.live: list[_Seq] = []  # live[r]: the sequence in batch row r
        self.steps = 0              # steps the batch has taken

    def __len__(self) -> int:
        return len(self.live)

    # -- a sequence joins -------------------------------------------------------------------
    @torch.inference_mode()
    def join(self, key: Hashable, drafter: Drafter, prompt: list[int], cap: int,
             generator: Optional[torch.Generator] = None, policy: Optional[AdaptiveBudget] = None) -> Emitted:
        """Prefill `prompt` on its own and add it as the batch's last row (step 1 for one
        sequence): its first token. `drafter` must not be drafting another live sequence. A
        sequence whose first token ends it (EOS, a cap of 1) leaves at once (`Emitted.done`)."""
        if cap < 1:
            raise ValueError("a sequence needs a cap of at least one token")
        if any(s.key == key for s in self.live):
            raise ValueError(f"a live sequence already has key {key!r}")
        if any(s.drafter is drafter for s in self.live):
            raise ValueError("every live sequence needs its own drafter instance (drafting state is per sequence)")
        if self.want is None:
            self.want = wants(drafter)
        if wants(drafter) != self.want:
            raise ValueError("every drafter of a continuous batch must ask the target for the same features")
        drafter.reset(list(prompt))
        if policy is not None:
            policy.begin()
        self.batch, prefills = self.target.join(self.batch, [list(prompt)], cap + self.budget + self.room, self.want)
        ids, produced, fresh = self.decoder._first([prompt], prefills, [generator])
        seq = _Seq(key, drafter, list(prompt), cap, generator, policy, Generation(prompt_tokens=len(prompt)),
                   ids[0], produced[0], fresh[0])
        seq.ended_eos = seq.produced[-1] in self.decoder.eos_ids
        self.live.append(seq)
        return self._leave([len(self.live) - 1])[0]

    # -- a step of every live sequence ------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[Emitted]:
        """One draft + verify step over every live sequence, in row order, then those that ended
        leave (steps 2a-2f of the decoder's loop). One `Emitted` per sequence that was live."""
        if not self.live:
            return []
        dec, target, budget, want = self.decoder, self.target, self.budget, self.want or False
        states, drafts = [], []
        for s in self.live:
            state = DecodeState(ids=s.ids, prompt_len=len(s.prompt), budget=budget,
                                remaining=s.cap - len(s.produced), step=s.gen.steps, hidden=s.fresh)
            draft = s.drafter.propose(state)                                              # 2a
            if s.policy is not None:
                draft = s.policy.choose(draft)
            if 1 + len(draft) > budget:
                raise BudgetExceeded(f"{s.drafter.name or type(s.drafter).__name__} proposed {len(draft)} "
                                     f"tokens at block complexity {budget} (at most {budget - 1})")
            states.append(state)
            drafts.append(draft)
        assert self.batch is not None
        past = self.batch.length
        fwd = target.verify(self.batch, [s.ids[-1] for s in self.live], drafts, want)   # 2b
        topk = [int(getattr(s.drafter, "host_topk", 0) or 0) for s in self.live]
        bounds, k = _rows(drafts), max(topk)
        verdicts, parts, tops, values = dec._verdicts(fwd.logits, bounds, drafts, [s.generator for s in self.live],
                                                      k, [_host_values(s.drafter) for s in self.live])  # 2c
        keeps = [[0] + [a + 1 for a in v.accepted] for v in verdicts]
        target.commit(self.batch, past, keeps)                                            # 2d
        for r, s in enumerate(self.live):                                                 # 2e
            v = verdicts[r]
            s.ids.extend(v.new_tokens)
            s.produced.extend(v.new_tokens)
            if fwd.features is not None:
                s.fresh = _path(fwd.features[r], keeps[r])
            result = VerifyResult(drafts[r], v.accepted, v.new_tokens, parts[r], s.fresh, v.preds, states[r],
                                  _top(tops, bounds[r], topk[r], k), values[r] if values else None)
            s.drafter.observe(result)
            if s.policy is not None:
                s.policy.observe(drafts[r], v.accepted, v.new_tokens)
            s.ended_eos = dec._record(s.gen, drafts[r], v, len(s.produced), s.cap)
        self.steps += 1
        return self._leave(list(range(len(self.live))))                                 # 2f

    # -- leaving ----------------------------------------------------------------------------
    def _leave(self, rows: list[int]) -> list[Emitted]:
        """What rows `rows` gained since they last emitted; those that ended (EOS, cap, a lossy
        drafter's `finished()`) leave the batch, the last row moving into each freed row as the
        target moves it, after a lossy drafter's epilogue (decoder step 4) on its own cache."""
        dec = self.decoder
        out, gone = {}, []
        for r in rows:
            s = self.live[r]
            answer = s.produced[:dec._kept(s.produced, 0, s.cap)]
            out[r] = Emitted(s.key, answer[s.kept:])
            s.kept = len(answer)
            finished = getattr(s.drafter, "finished", None)
            if len(s.produced) >= s.cap or s.ended_eos or (finished is not None and finished()):
                gone.append(r)
        emitted = list(out.values())
        for r in sorted(gone, reverse=True):
            s, done = self.live[r], out[r]
            s.gen.output_ids, epi = dec._cut(s.drafter, s.produced, s.cap)
            if epi is not None:  # the answer loses a final EOS; the trigger and its answer follow
                before = s.kept - len(done.tokens)  # emitted before this call: a prefix of the final answer
                single = self.target.detach(self.batch, r)
                s.gen.output_ids = dec._epilogue(single, s.prompt, s.gen.output_ids, epi, s.generator, s.gen)
                done.tokens = s.gen.output_ids[before:]
            dec._stats(s.drafter, epi, s.gen)
            self.target.leave(self.batch, r)
            self.live[r] = self.live[-1]
            self.live.pop()
            done.done = s.gen
        return emitted
