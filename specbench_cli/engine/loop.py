"""The decoding loop shared by every method, at every batch size (batch size 1 is a batch of one).

Every sequence has its own drafter (one instance per sequence, so no drafting state is shared),
its own draft within the block complexity, its own positions, tree mask and KV length. The
target (engine/target.py) computes every forward and holds the keys/values:

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
The drafter contract (`Drafter`, `DecodeState`, `VerifyResult`) is in `engine/drafter.py`.

What a step costs at batch size N: the target processes `N x (1 + longest draft)` tokens,
padding included; `Generation.budget_used` records each sequence's own block (1 + its draft).
Clock: `prefill_time` is the time until decoding starts (every prompt's prefill), `wall_time`
runs from the batch's start to the sequence's finish (plus its epilogue); per step a sequence's
drafting time is its own drafter's (propose + observe), its verify time the shared forward's and
the verdicts', and its overhead the rest of the step (building the forward's inputs, the cache
commit, the other sequences' drafting). Where the split is asked for (`split`: always on a CPU,
where reading the clock is all it costs; on CUDA only with `time_steps`, since each part's end
must then wait for the device) each step is also cut into its parts: the drafter's `propose` and
`observe` (its own), the target's forward (`Target.verify` from `Forward.started` to its return),
the acceptance (every live sequence's verdict), the cache commit (`Target.commit`); the rest of
the decode time (building the forward's inputs, bookkeeping, leaving, the other sequences'
drafting) is what reports call "other" (docs/metrics.md). Whether batched arithmetic changes a sequence's tokens
against batch size 1 is not assumed: the tests and reports measure it (cross-batch agreement).
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from specbench_cli.engine.budget import AdaptiveBudget
from specbench_cli.engine.draft import Draft, depths
from specbench_cli.engine.drafter import DecodeState, Drafter, VerifyResult
from specbench_cli.engine.target import Batch, Target
from specbench_cli.engine.verify import SamplingConfig, Verdict, verify_greedy, verify_sampling


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


def _sync(device: Any) -> None:
    if getattr(device, "type", None) == "cuda":
        torch.cuda.synchronize(device)


def deepest(draft: Draft) -> int:
    """Draft positions on the draft's longest root-to-leaf path of acceptable nodes: the most
    draft tokens one step could accept (a chain's length)."""
    if not draft.tokens:
        return 0
    d, ok = depths(tuple(draft.parents)), draft.acceptable
    return max(d) if ok is None else max((x for x, keep in zip(d, ok) if keep), default=0)


def wants(drafter: Drafter) -> bool | tuple[int, ...]:
    """What a drafter asks the target for besides logits: nothing, the last hidden states, or
    (a tuple of layer indices) the inputs of those layers."""
    if not drafter.needs_hidden_states:
        return False
    layers = getattr(drafter, "hidden_layers", None)
    return tuple(layers) if layers else True


class Decoder:
    """Runs drafters against one target (a `Target`, or a transformers model, which is wrapped in
    an `HFTarget`), one forward per step over every live sequence."""

    def __init__(self, target: Any, eos_ids: set[int] | list[int], sampling: SamplingConfig | None = None,
                 time_steps: bool = False) -> None:
        from specbench_cli.engine.targets import as_target

        self.target: Target = as_target(target)
        self.eos_ids = set(eos_ids)
        self.sampling = sampling or SamplingConfig()
        self.device = self.target.device
        kind = getattr(self.device, "type", None)
        # each step cut into its parts (module doc): free on a CPU; on CUDA only when asked for,
        # since every part's end then waits for the device
        self.split = kind in (None, "cpu") or (bool(time_steps) and kind == "cuda")
        self._part_sync = bool(time_steps) and kind == "cuda"

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
        objects) and cap; one Generation each.

        The budget: `budget` is the block complexity, at most `budget` tokens per sequence per
        forward (a fixed budget, or the one `auto` chose); `policies` (None: none) gives a
        sequence an adaptive budget (engine/budget.py, one object per sequence: its answer's
        counts are its own) that keeps, each step, the part of its drafter's proposal worth
        verifying within `budget`, and sees each verdict.

        Kept as one function on purpose: the clock reads that split each step into drafting,
        verifying and overhead must be read top to bottom in one place."""
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
        target = self.target
        gens = list(generators) if generators is not None else [None] * n
        want = wants(drafters[0])
        out = [Generation(prompt_tokens=len(p)) for p in prompts]
        clock = time.perf_counter
        _sync(self.device)
        t_start = clock()

        # 1. prefill, each prompt on its own
        for drafter, policy, prompt in zip(drafters, policies, prompts):
            drafter.reset(list(prompt))
            if policy is not None:  # an adaptive budget's answer counts
                policy.begin()
        batch, prefills = target.start([list(p) for p in prompts], max(max_new_tokens) + budget, want)
        seqs, produced, fresh = [], [], []
        for b, (prompt, fwd) in enumerate(zip(prompts, prefills)):
            first = self._choose(Draft(), fwd.logits[-1:], gens[b]).new_tokens[0]
            seqs.append(list(prompt) + [first])
            produced.append([first])
            fresh.append(fwd.features[0] if fwd.features is not None else None)
        t_now = clock()
        for g in out:
            g.prefill_time = t_now - t_start
        # the optional hooks of lossy drafters; duck-typed drafters (no Drafter base) lack them
        finished = [getattr(d, "finished", None) or (lambda: False) for d in drafters]

        ended_eos = [produced[b][-1] in self.eos_ids for b in range(n)]  # an EOS anywhere in a step's tokens ends it

        def done(b: int) -> bool:
            return len(produced[b]) >= max_new_tokens[b] or ended_eos[b] or finished[b]()

        split, part_sync, device = self.split, self._part_sync, self.device
        if split:
            for g in out:
                g.propose_time = g.forward_time = g.accept_time = g.commit_time = g.observe_time = 0.0
        live = list(range(n))  # live[r]: the sequence in batch row r
        epilogues: dict[int, tuple[Batch, Any]] = {}
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
                    epilogues[b] = (target.detach(batch, r), epi)
                ended[b] = when
                target.leave(batch, r)
                live[r] = live[-1]
                live.pop()

        leave([r for r, b in enumerate(live) if done(b)])

        # 2. decode
        topk = [int(getattr(d, "host_topk", 0) or 0) for d in drafters]   # VerifyResult.top
        # VerifyResult.values: the drafters that override Drafter.host_values (duck-typed ones may lack it)
        hooked = [getattr(d, "host_values", None) if getattr(type(d), "host_values", Drafter.host_values)
                  is not Drafter.host_values else None for d in drafters]
        while live:
            t0 = clock()
            states, drafts, own = [], [], []
            for b in live:
                ts = clock()
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
                if part_sync:
                    _sync(device)
                own.append(clock() - ts)
            past = batch.length
            fwd = target.verify(batch, [seqs[b][-1] for b in live], drafts, want)          # 2b
            if part_sync:
                _sync(device)
            t1 = clock()
            # the step's one wait for the device: every sequence's argmax (and top-k) at once
            k = max(topk[b] for b in live)
            bounds, start = [], 0
            for r in range(len(live)):
                bounds.append((start, start + 1 + len(drafts[r])))
                start += 1 + len(drafts[r])
            hooks = [(s, e, hooked[b]) for (s, e), b in zip(bounds, live)] if any(hooked[b] for b in live) else ()
            preds, tops, values = self._to_host(fwd.logits, k, hooks)
            verdicts, parts = [], []
            for r, b in enumerate(live):                                                   # 2c
                start, end = bounds[r]
                part = fwd.logits[start:end]
                parts.append(part)
                verdicts.append(self._choose(drafts[r], part, gens[b],
                                             preds[start:end] if preds is not None else None))
            t2 = clock()
            keeps = [[0] + [a + 1 for a in v.accepted] for v in verdicts]
            target.commit(batch, past, keeps)                                              # 2d
            if part_sync:
                _sync(device)
            t3 = clock()
            results = []
            for r, b in enumerate(live):
                v = verdicts[r]
                seqs[b].extend(v.new_tokens)
                produced[b].extend(v.new_tokens)
                if fwd.features is not None:  # root + accepted path, in path order
                    keep, feats = keeps[r], fwd.features[r]
                    # a path of consecutive rows (any chain) is a slice (copied, as an index would
                    # copy): no index list to copy to the device
                    fresh[b] = feats[:len(keep)].clone() if keep[-1] == len(keep) - 1 else feats[keep]
                top = None
                if tops is not None and topk[b]:
                    top = tops[bounds[r][0]:bounds[r][1]]
                    if topk[b] < k:
                        top = [row[:topk[b]] for row in top]
                results.append(VerifyResult(drafts[r], v.accepted, v.new_tokens, parts[r], fresh[b], v.preds,
                                            states[r], top, values[r] if values else None))
            proposing = list(own)
            for r, b in enumerate(live):                                                   # 2e
                ts = clock()
                drafters[b].observe(results[r])
                if policies[b] is not None:
                    policies[b].observe(drafts[r], verdicts[r].accepted, verdicts[r].new_tokens)
                if part_sync:
                    _sync(device)
                own[r] += clock() - ts
            t4 = clock()
            verifying = t2 - fwd.started
            forward, accept, commit = t1 - fwd.started, t2 - t1, t3 - t2
            for r, b in enumerate(live):
                g, d, v = out[b], drafts[r], verdicts[r]
                kept = self._kept(v.new_tokens, len(produced[b]) - len(v.new_tokens), max_new_tokens[b])
                g.accept_lengths.append(kept)
                ended_eos[b] = kept > 0 and v.new_tokens[kept - 1] in self.eos_ids  # (an EOS past the cap: done anyway)
                g.draft_sizes.append(d.n_acceptable())
                g.draft_path_lengths.append(v.path_length)
                g.draft_depths.append(deepest(d))
                g.budget_used.append(1 + len(d))
                g.step_draft_ms.append(round(1000 * own[r], 3))
                g.step_verify_ms.append(round(1000 * verifying, 3))
                g.draft_time += own[r]
                g.verify_time += verifying
                g.overhead_time += (t4 - t0) - own[r] - verifying
                if split:  # own[r] = propose + observe, verifying = forward + accept, as before
                    observe = own[r] - proposing[r]
                    g.step_propose_ms.append(round(1000 * proposing[r], 3))
                    g.step_forward_ms.append(round(1000 * forward, 3))
                    g.step_accept_ms.append(round(1000 * accept, 3))
                    g.step_commit_ms.append(round(1000 * commit, 3))
                    g.step_observe_ms.append(round(1000 * observe, 3))
                    g.propose_time += proposing[r]
                    g.forward_time += forward
                    g.accept_time += accept
                    g.commit_time += commit
                    g.observe_time += observe
            leave([r for r, b in enumerate(live) if done(b)])                                # 2f

        # 3./4. lossy epilogues, each on its own sequence's keys/values, after the batch
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
