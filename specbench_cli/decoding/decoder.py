"""The decoding loop shared by every method, at every batch size (batch size 1 is a batch of one).

Every sequence has its own drafter (one instance per sequence, so no drafting state is shared),
its own draft within the block complexity, its own positions, tree mask and KV length. The
target (decoding/target.py) computes every forward and holds the keys/values:

    1. prefill each prompt on its own (`Target.start`) and take its first token from its last
       logits;
    2. step until every sequence has finished:
       a. each live sequence's drafter proposes a tree within the budget (`propose`); a
          sequence's adaptive budget, where it has one, keeps the part worth verifying;
       b. one target forward over every live sequence's root + tree (`Target.verify`);
       c. each sequence's verdict from its own rows' logits (and its own sampling generator):
          the accepted path and the bonus token. Greedy decoding waits for the device once per
          step: every row's argmax (and the top-k a drafter declares it reads, `host_topk`, and
          what its `host_values` computes on its rows) comes to the host in one transfer, and
          verdicts and drafters work on those host lists;
       d. the target keeps each sequence's root and accepted path (`Target.commit`);
       e. each drafter sees its result (`observe`); metrics are recorded;
       f. a sequence that reached EOS, its cap or its drafter's `finished()` (a lossy drafter
          ending early) leaves the batch (`Target.leave`); nothing it did alters the others'
          rows, positions or masks;
    3. per sequence: the output cut at EOS and the length cap;
    4. lossy drafters only (`epilogue()`): after the batch, feed the tokens it returns after
       that sequence's output and decode a short continuation on its own keys/values
       (`Target.detach`: fastcot's answer trigger and answer).

The root of every step is the last accepted token, which is not yet in the KV cache.
The drafter contract (`Drafter`, `DecodeState`, `VerifyResult`) is in `decoding/drafter.py`.

What a step costs at batch size N: the target processes `N x (1 + longest draft)` tokens,
padding included; `Generation.budget_used` records each sequence's own block (1 + its draft).
What each step and sequence costs (`Generation`'s times, the split of a step into its parts) is
read at named marks by the decoder's clock (`StepClock`, decoding/clock.py: the times, where they
start and end, and when the clock waits for the device). Whether batched arithmetic changes a
sequence's tokens against batch size 1 is not assumed: the tests and reports measure it
(cross-batch agreement).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from specbench_cli.decoding.budget import AdaptiveBudget
from specbench_cli.decoding.clock import StepClock
from specbench_cli.decoding.draft import Draft, depths
from specbench_cli.decoding.drafter import DecodeState, Drafter, VerifyResult
from specbench_cli.decoding.target import Batch, Target
from specbench_cli.decoding.verify import SamplingConfig, Verdict, verify_greedy, verify_sampling


class BudgetExceeded(RuntimeError):
    """A drafter proposed more tokens than the block complexity allows (a bug in the drafter)."""


@dataclass
class Generation:
    """Output and per-step record of one sequence's generation."""

    output_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    wall_time: float = 0.0
    prefill_time: float = 0.0
    draft_time: float = 0.0
    verify_time: float = 0.0
    overhead_time: float = 0.0
    accept_lengths: list[int] = field(default_factory=list)  # tokens each step added to the output (cut at EOS and the cap)
    draft_sizes: list[int] = field(default_factory=list)
    draft_path_lengths: list[int] = field(default_factory=list)  # draft positions on the path the target took
    budget_used: list[int] = field(default_factory=list)
    step_draft_ms: list[float] = field(default_factory=list)
    step_verify_ms: list[float] = field(default_factory=list)
    draft_depths: list[int] = field(default_factory=list)  # the deepest acceptable draft node per step
    # the split of each step (module doc); empty lists and None totals where it was not measured
    step_propose_ms: list[float] = field(default_factory=list)
    step_forward_ms: list[float] = field(default_factory=list)
    step_accept_ms: list[float] = field(default_factory=list)
    step_commit_ms: list[float] = field(default_factory=list)
    step_observe_ms: list[float] = field(default_factory=list)
    propose_time: Optional[float] = None
    forward_time: Optional[float] = None
    accept_time: Optional[float] = None
    commit_time: Optional[float] = None
    observe_time: Optional[float] = None
    epilogue_tokens: int = 0     # tokens decoded after the drafter's epilogue (lossy methods only)
    stats: Optional[dict] = None  # the drafter's `stats()` after this generation

    @property
    def steps(self) -> int:
        return len(self.accept_lengths)


def deepest(draft: Draft) -> int:
    """Draft positions on the draft's longest root-to-leaf path of acceptable nodes: the most
    draft tokens one step could accept (a chain's length)."""
    if not draft.tokens:
        return 0
    d, ok = depths(tuple(draft.parents)), draft.acceptable
    return max(d) if ok is None else max((x for x, keep in zip(d, ok) if keep), default=0)


def _host_values(drafter: Drafter) -> Any:
    """The drafter's `host_values` where it overrides `Drafter.host_values` (duck-typed drafters
    may lack it), else None: nothing of its rows to compute in the step's transfer."""
    if getattr(type(drafter), "host_values", Drafter.host_values) is Drafter.host_values:
        return None
    return getattr(drafter, "host_values", None)


def _rows(drafts: Sequence[Draft]) -> list[tuple[int, int]]:
    """Each sequence's rows `(start, end)` in the step's forward (its root and its draft), in
    batch row order."""
    bounds, start = [], 0
    for draft in drafts:
        bounds.append((start, start + 1 + len(draft)))
        start += 1 + len(draft)
    return bounds


def _path(features: torch.Tensor, keep: list[int]) -> torch.Tensor:
    """A sequence's features at its root and accepted path (`keep`: its rows, in path order). A
    path of consecutive rows (any chain) is a slice (copied, as an index would copy): no index
    list to copy to the device."""
    return features[:len(keep)].clone() if keep[-1] == len(keep) - 1 else features[keep]


def _top(tops: Optional[list[list[int]]], rows: tuple[int, int], want: int, k: int) -> Optional[list[list[int]]]:
    """A sequence's `VerifyResult.top`: its rows' `want` best token ids out of the step's `k`
    (`tops`), or None where its drafter asks for none."""
    if tops is None or not want:
        return None
    top = tops[rows[0]:rows[1]]
    return [row[:want] for row in top] if want < k else top


def wants(drafter: Drafter) -> bool | tuple[int, ...]:
    """What a drafter asks the target for besides logits: nothing, the last hidden states, or
    (a tuple of layer indices) the inputs of those layers."""
    if not drafter.needs_hidden_states:
        return False
    layers = getattr(drafter, "hidden_layers", None)
    return tuple(layers) if layers else True


class Decoder:
    """Runs drafters against one target (a `Target`; `specbench_cli.targets.as_target` wraps a
    bare transformers model), one forward per step over every live sequence."""

    def __init__(self, target: Target, eos_ids: set[int] | list[int], sampling: SamplingConfig | None = None,
                 time_steps: bool = False) -> None:
        if not isinstance(target, Target):
            raise TypeError(f"Decoder needs a Target, not {type(target).__name__} "
                            "(specbench_cli.targets.as_target wraps a transformers model)")
        self.target = target
        self.eos_ids = set(eos_ids)
        self.sampling = sampling or SamplingConfig()
        self.device = self.target.device
        self.clock = StepClock(self.device, time_steps)

    @property
    def split(self) -> bool:
        """Whether each step is cut into its parts (`StepClock.split`)."""
        return self.clock.split

    @property
    def _part_sync(self) -> bool:
        """Whether each part's end waits for the device (`StepClock.part_sync`)."""
        return self.clock.part_sync

    def _choose(self, draft: Draft, logits: torch.Tensor, generator, preds: Optional[list[int]] = None) -> Verdict:
        if self.sampling.greedy:
            return verify_greedy(draft, logits, preds)
        return verify_sampling(draft, logits, self.sampling, generator)

    def _to_host(self, logits: torch.Tensor, k: int, hooks: Sequence[tuple[int, int, Any]] = ()
                 ) -> tuple[Optional[list[int]], Optional[list[list[int]]], list[Optional[list[float]]]]:
        """A step's one transfer from the device: every row's argmax (greedy decoding: the
        verdicts') and, when drafters ask for them (`Drafter.host_topk`), every row's `k` best
        token ids, as host lists (None where not needed); and per `(start, end, host_values)` in
        `hooks` (None: no hook) what that drafter's `Drafter.host_values` computed on its rows
        `start:end`, as a flat float list (None where it computed nothing)."""
        greedy = self.sampling.greedy
        k = min(k, logits.shape[-1])
        values: list[Optional[list[float]]] = [None] * len(hooks)
        if not greedy and not k and not any(h for _, _, h in hooks):
            return None, None, values
        if logits.device.type == "cpu":
            # torch's CPU argmax over a long last dimension is an unvectorised loop (10 x 49152
            # float32 logits: 1.1 ms on one core; numpy's, the same first-maximum rule: 0.05 ms):
            # the logits' host view once, numpy's argmax, torch's topk on that view; the drafters'
            # own work runs on that host view too (nothing more to wait for)
            host = (logits if logits.dtype == torch.float32 else logits.float()).detach().numpy()
            view = torch.from_numpy(host)
            for i, (start, end, hook) in enumerate(hooks):
                out = hook(view[start:end]) if hook is not None else None
                values[i] = out.to(torch.float64).reshape(-1).tolist() if out is not None else None
            preds = host.argmax(axis=-1).tolist() if greedy else None
            return preds, (view.topk(k, dim=-1).indices.tolist() if k else None), values
        # the ids (argmax, top-k) and the drafters' floats, carried as their int64 bit patterns,
        # in one tensor: one transfer, the floats read back bit for bit on the host
        cols = [logits.argmax(dim=-1, keepdim=True)] if greedy else []
        cols += [logits.topk(k, dim=-1).indices] if k else []
        parts = [torch.cat(cols, dim=1).reshape(-1)] if cols else []
        sizes = []
        for i, (start, end, hook) in enumerate(hooks):
            out = hook(logits[start:end]) if hook is not None else None
            if out is not None:
                parts.append(out.to(torch.float64).reshape(-1).view(torch.int64))
                sizes.append((i, parts[-1].numel()))
        flat = torch.cat(parts).tolist() if parts else []
        width = int(greedy) + k
        n_int = width * logits.shape[0]
        floats = array("d", array("q", flat[n_int:]).tobytes()).tolist() if sizes else []
        at = 0
        for i, size in sizes:
            values[i] = floats[at:at + size]
            at += size
        rows = [flat[r * width:(r + 1) * width] for r in range(logits.shape[0])] if width else []
        preds = [row[0] for row in rows] if greedy else None
        return preds, ([row[int(greedy):] for row in rows] if k else None), values

    def generate(self, drafter: Drafter, prompt_ids: list[int], max_new_tokens: int, budget: int,
                 generator: Optional[torch.Generator] = None, policy: Optional[AdaptiveBudget] = None) -> Generation:
        """Decode up to `max_new_tokens` after `prompt_ids` with at most `budget` tokens per forward
        (a batch of one); `policy`: an adaptive budget within it (`generate_batch`)."""
        return self.generate_batch([drafter], [prompt_ids], [max_new_tokens], budget,
                                   [generator] if generator is not None else None,
                                   [policy] if policy is not None else None)[0]

    # -- the loop -------------------------------------------------------------------------
    @torch.inference_mode()
    def generate_batch(self, drafters: Sequence[Drafter], prompts: Sequence[list[int]],
                       max_new_tokens: Sequence[int], budget: int,
                       generators: Optional[Sequence[Optional[torch.Generator]]] = None,
                       policies: Optional[Sequence[Optional[AdaptiveBudget]]] = None) -> list[Generation]:
        """Decode every prompt with its own drafter (`drafters[i]` for `prompts[i]`, distinct
        objects) and cap, at most `budget` tokens per sequence per forward (a fixed budget, or the
        one `auto` chose); one Generation each. `policies` (None: none) gives a sequence an
        adaptive budget (decoding/budget.py, one object per sequence: its answer's counts are its
        own) that keeps, each step, the part of its drafter's proposal worth verifying within
        `budget`, and sees each verdict. The steps are the module doc's; what each one costs is
        read by `self.clock` (decoding/clock.py)."""
        n = len(prompts)
        gens, policies = self._check(drafters, prompts, max_new_tokens, budget, generators, policies)
        target, clock = self.target, self.clock
        want = wants(drafters[0])
        out = [Generation(prompt_tokens=len(p)) for p in prompts]
        clock.start(out)

        # 1. prefill, each prompt on its own
        for drafter, policy, prompt in zip(drafters, policies, prompts):
            drafter.reset(list(prompt))
            if policy is not None:  # an adaptive budget's answer counts
                policy.begin()
        batch, prefills = target.start([list(p) for p in prompts], max(max_new_tokens) + budget, want)
        seqs, produced, fresh = self._first(prompts, prefills, gens)
        clock.prefilled(out)
        # the optional hooks of lossy drafters; duck-typed drafters (no Drafter base) lack them
        finished = [getattr(d, "finished", None) or (lambda: False) for d in drafters]
        ended_eos = [produced[b][-1] in self.eos_ids for b in range(n)]  # an EOS anywhere in a step's tokens ends it
        live = list(range(n))  # live[r]: the sequence in batch row r
        epilogues: dict[int, tuple[Batch, Any]] = {}

        def leave() -> None:
            rows = [r for r, b in enumerate(live) if len(produced[b]) >= max_new_tokens[b] or ended_eos[b]
                    or finished[b]()]
            if rows:
                clock.leave([live[r] for r in rows])
            for r in sorted(rows, reverse=True):  # the last row moves into r: drop from the end
                b = live[r]
                out[b].output_ids, epi = self._cut(drafters[b], produced[b], max_new_tokens[b])
                if epi is not None:
                    epilogues[b] = (target.detach(batch, r), epi)
                target.leave(batch, r)
                live[r] = live[-1]
                live.pop()

        leave()

        # 2. decode
        topk = [int(getattr(d, "host_topk", 0) or 0) for d in drafters]   # VerifyResult.top
        hooked = [_host_values(d) for d in drafters]                       # VerifyResult.values
        while live:
            clock.step()
            states, drafts = [], []
            for b in live:
                clock.own()
                state = DecodeState(ids=seqs[b], prompt_len=len(prompts[b]), budget=budget,
                                    remaining=max_new_tokens[b] - len(produced[b]), step=out[b].steps, hidden=fresh[b])
                draft = drafters[b].propose(state)                                         # 2a
                if policies[b] is not None:  # an adaptive budget keeps the part worth verifying
                    draft = policies[b].choose(draft)
                if 1 + len(draft) > budget:
                    raise BudgetExceeded(f"{drafters[b].name or type(drafters[b]).__name__} proposed {len(draft)} "
                                         f"tokens at block complexity {budget} (at most {budget - 1})")
                states.append(state)
                drafts.append(draft)
                clock.mark("propose")
            past = batch.length
            fwd = target.verify(batch, [seqs[b][-1] for b in live], drafts, want)          # 2b
            clock.mark("forward", fwd.started)
            bounds, k = _rows(drafts), max(topk[b] for b in live)
            verdicts, parts, tops, values = self._verdicts(fwd.logits, bounds, drafts, [gens[b] for b in live],
                                                           k, [hooked[b] for b in live])   # 2c
            clock.mark("accept")
            keeps = [[0] + [a + 1 for a in v.accepted] for v in verdicts]
            target.commit(batch, past, keeps)                                              # 2d
            clock.mark("commit")
            for r, b in enumerate(live):                                                   # 2e
                v = verdicts[r]
                seqs[b].extend(v.new_tokens)
                produced[b].extend(v.new_tokens)
                if fwd.features is not None:  # root + accepted path, in path order
                    fresh[b] = _path(fwd.features[r], keeps[r])
                result = VerifyResult(drafts[r], v.accepted, v.new_tokens, parts[r], fresh[b], v.preds, states[r],
                                      _top(tops, bounds[r], topk[b], k), values[r] if values else None)
                clock.own()
                drafters[b].observe(result)
                if policies[b] is not None:
                    policies[b].observe(drafts[r], v.accepted, v.new_tokens)
                clock.mark("observe")
            clock.record([out[b] for b in live])
            for r, b in enumerate(live):
                ended_eos[b] = self._record(out[b], drafts[r], verdicts[r], len(produced[b]), max_new_tokens[b])
            leave()                                                                        # 2f

        self._finish(out, drafters, prompts, epilogues, gens)                              # 3./4.
        return out

    def _first(self, prompts: Sequence[list[int]], prefills: list, generators: list[Optional[torch.Generator]]
               ) -> tuple[list[list[int]], list[list[int]], list[Optional[torch.Tensor]]]:
        """Step 1's end: each sequence's first token from its prompt's last logits. Returns per
        sequence its ids so far (prompt + first token), the tokens it produced, and the features
        its drafter sees first (the prefill's, where the drafter asked for them)."""
        seqs, produced, fresh = [], [], []
        for prompt, fwd, generator in zip(prompts, prefills, generators):
            first = self._choose(Draft(), fwd.logits[-1:], generator).new_tokens[0]
            seqs.append(list(prompt) + [first])
            produced.append([first])
            fresh.append(fwd.features[0] if fwd.features is not None else None)
        return seqs, produced, fresh

    def _verdicts(self, logits: torch.Tensor, bounds: list[tuple[int, int]], drafts: list[Draft],
                  generators: list[Optional[torch.Generator]], k: int, hooked: list[Any]
                  ) -> tuple[list[Verdict], list[torch.Tensor], Optional[list[list[int]]], list[Optional[list[float]]]]:
        """Step 2c, per batch row: the verdict of the row's sequence from its own rows (`bounds`) of
        the forward's logits, after the step's one wait for the device (`_to_host`: every row's
        argmax, its `k` best ids, the drafters' `hooked` host values). Returns the verdicts, each
        sequence's logits, the top-k ids of every row and each sequence's host values."""
        hooks = [(s, e, hook) for (s, e), hook in zip(bounds, hooked)] if any(hooked) else ()
        preds, tops, values = self._to_host(logits, k, hooks)
        parts = [logits[s:e] for s, e in bounds]
        verdicts = [self._choose(draft, part, generator, preds[s:e] if preds is not None else None)
                    for draft, part, generator, (s, e) in zip(drafts, parts, generators, bounds)]
        return verdicts, parts, tops, values

    def _finish(self, out: list[Generation], drafters: Sequence[Drafter], prompts: Sequence[list[int]],
                epilogues: dict[int, tuple[Batch, Any]], generators: list[Optional[torch.Generator]]) -> None:
        """Steps 3 and 4, after the batch: the lossy epilogues, each on its own sequence's keys and
        values, then every sequence's stats and wall time."""
        clock = self.clock
        clock.read(wait=True)
        for b, g in enumerate(out):
            extra = 0.0
            if b in epilogues:
                single, epi = epilogues[b]
                ts = clock.read()
                g.output_ids = self._epilogue(single, list(prompts[b]), g.output_ids, epi, generators[b], g)
                extra = clock.read(wait=True) - ts
            self._stats(drafters[b], epilogues.get(b, (None, None))[1], g)
            g.wall_time = clock.wall(b, extra)

    @staticmethod
    def _check(drafters: Sequence[Drafter], prompts: Sequence[list[int]], max_new_tokens: Sequence[int],
               budget: int, generators: Optional[Sequence[Optional[torch.Generator]]],
               policies: Optional[Sequence[Optional[AdaptiveBudget]]]
               ) -> tuple[list[Optional[torch.Generator]], list[Optional[AdaptiveBudget]]]:
        """`generate_batch`'s arguments checked; its generators and adaptive budgets, one per
        sequence (None where there is none)."""
        n = len(prompts)
        if not n or len(drafters) != n or len(max_new_tokens) != n:
            raise ValueError("generate_batch needs one drafter and one cap per prompt, and at least one prompt")
        if len({id(d) for d in drafters}) != n:
            raise ValueError("every sequence needs its own drafter instance (drafting state is per sequence)")
        if budget < 1:
            raise ValueError("block complexity must be at least 1")
        policies = list(policies) if policies is not None else [None] * n
        if len(policies) != n:
            raise ValueError("generate_batch needs one adaptive budget (or None) per prompt")
        return (list(generators) if generators is not None else [None] * n), policies

    def _record(self, g: Generation, draft: Draft, v: Verdict, produced: int, max_new_tokens: int) -> bool:
        """A step's draft and verdict into the sequence's Generation (its times: `StepClock.record`),
        `produced` tokens after it; whether the tokens the output keeps end at an EOS."""
        kept = self._kept(v.new_tokens, produced - len(v.new_tokens), max_new_tokens)
        g.accept_lengths.append(kept)
        g.draft_sizes.append(draft.n_acceptable())
        g.draft_path_lengths.append(v.path_length)
        g.draft_depths.append(deepest(draft))
        g.budget_used.append(1 + len(draft))
        return kept > 0 and v.new_tokens[kept - 1] in self.eos_ids  # (an EOS past the cap: done anyway)

    def _epilogue(self, single: Batch, prompt_ids: list[int], out_ids: list[int], epi, generator,
                  g: Generation) -> list[int]:
        """Drop a final EOS, feed `epi.tokens` after the decoded text in one forward, then decode
        up to `epi.max_new_tokens` tokens one at a time. Returns decoded + epi.tokens + answer.

        The batch of one holds every token but the last of prompt + decoded (the root is never
        cached), possibly more (accepted past the cap): crop it to that, then feed root + tokens."""
        target = self.target
        body = out_ids[:-1] if out_ids and out_ids[-1] in self.eos_ids else list(out_ids)
        seq = prompt_ids + body
        target.crop(single, len(seq) - 1)
        logits = target.verify(single, [seq[-1]], [Draft.chain(list(epi.tokens))]).logits
        answer = [self._choose(Draft(), logits[-1:], generator).new_tokens[0]]
        while len(answer) < epi.max_new_tokens and answer[-1] not in self.eos_ids:
            past = single.length
            logits = target.verify(single, [answer[-1]], [Draft()]).logits
            target.commit(single, past, [[0]])
            answer.append(self._choose(Draft(), logits, generator).new_tokens[0])
        g.epilogue_tokens = len(answer)
        return body + list(epi.tokens) + answer

    def _kept(self, new_tokens: list[int], before: int, max_new_tokens: int) -> int:
        """How many of `new_tokens`, produced after `before` others, the output keeps: none past the
        cap, none after an EOS. The one rule of `_cut` (the whole answer) and of each step's accept
        length (a step that accepted past either counts only what the answer holds, so #MAT is
        tokens of the answer per step)."""
        kept = min(len(new_tokens), max(max_new_tokens - before, 0))
        for i, tok in enumerate(new_tokens[:kept]):
            if tok in self.eos_ids:
                return i + 1
        return kept

    def _cut(self, drafter: Drafter, produced: list[int], max_new_tokens: int) -> tuple[list[int], Any]:
        """The output cut at EOS and at the cap, exactly as for every other method, and the
        drafter's epilogue for it (None unless a lossy drafter asks for one)."""
        out_ids = produced[:self._kept(produced, 0, max_new_tokens)]
        epilogue = getattr(drafter, "epilogue", None)
        return out_ids, (epilogue([t for t in out_ids if t not in self.eos_ids]) if epilogue else None)

    @staticmethod
    def _stats(drafter: Drafter, epi: Any, g: Generation) -> None:
        stats = getattr(drafter, "stats", None)
        g.stats = stats() if stats else None
        if epi is not None:
            g.stats = {**(g.stats or {}), "answer_tokens": g.epilogue_tokens}
