"""specbench's own decoding loop as a load backend: continuous batching of a trace's arrivals.

`OwnLoopBackend` serves one method instance of a load run (`store/load.py` `Backend`) in the
process that runs it, on the loaded model, with a scheduler around a running batch
(decoding/continuous.py `ContinuousBatch`):

    until the trace is served:
        admit every request due now: open loop, each whose `send_s` has passed; closed loop,
            as many as keep `point.level` in flight (a new one when one leaves);
            each admitted request is prefilled on its own forward (`Target.join`) and its
            first token streams at that forward's end;
        one draft + verify step over every live sequence (one batched forward), whose tokens
            stream at the step's end; sequences that reached EOS or their cap leave;
        with nothing in flight, wait for the next send time.

A request that arrives while a step runs joins at the next one (its TTFT includes that wait and
the prefills admitted with it). After `point.time_limit_s` nothing more is admitted and the
requests in flight finish. Warm-up requests (negative index) are served first, as their own
phase at the point's load, before the point's clock starts, and are not recorded; a method that
learns from earlier answers (suffix) then forgets them, as `specbench run` forgets its warm-up.

Each live sequence has its own drafter: the method bound once in `start`, then copies of it
(run/replicas.py: weights and the target shared) made as the number in flight first reaches each
count, returned to a pool when their request ends, so a drafter is reused as a batch slot is in
`specbench run`. Finished answers are handed to every drafter (`remember`), the answers of the
point so far, as a server's global memory would hold them.

Greedy decoding is the main case; at a temperature > 0 each request samples from its own
generator, seeded as `specbench run` seeds a question's turn (`runner.sample_seed`), so the
paired AR request draws from the same stream.

`synthetic` (methods/synthetic.py) needs the AR answer of each prompt: `reference(prompt_ids,
output_ids)` hands one over (the `ar` records of the same point carry them); for prompts still
without one, `serve` decodes them with AR in static batches before the point's clock starts.

What cannot run here is refused at construction with one line (`refusal`, also callable before
any model loads): an engine's own speculation (`ENGINE:METHOD` runs on its server), a target
without `Target.join` (llama.cpp's in-process target), and an `auto` or `adaptive` budget
without a block complexity for the point (a planned and calibrated method may be passed in).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

from specbench_cli.config.fields import RunConfig
from specbench_cli.config.instance import MethodInstance
from specbench_cli.config.syntax import ADAPTIVE, AUTO
from specbench_cli.errors import UsageError
from specbench_cli.names import baseline_of, is_baseline
from specbench_cli.store.load import LoadPoint, RequestRecord, TraceRequest

REFERENCE_BATCH = 8  # prompts per static batch when the backend decodes synthetic's references itself


def refusal(cfg: RunConfig, instance: MethodInstance) -> Optional[str]:
    """One line saying why the own loop cannot serve `instance`, or None. Needs no model."""
    from specbench_cli import targets

    if instance.engine is not None:
        return (f"{instance.label}: an engine's own speculation runs on its server, not in specbench's own loop "
                f"(load it with the engine's backend)")
    target = targets.get(cfg.model.target)
    if not target.can_join():
        return (f"{instance.label}: target '{cfg.model.target}' cannot add a request to a running batch, which "
                f"specbench's own loop under load needs (use --target hf)")
    return None


class OwnLoopBackend:
    """Serves a load point's trace for one method instance with continuous batching (module doc)."""

    def __init__(self, cfg: RunConfig, instance: MethodInstance, loaded: Any, method: Any = None) -> None:
        line = refusal(cfg, instance)
        if line is None and not loaded.target.can_join():
            line = f"{instance.label}: the loaded target cannot add a request to a running batch (Target.join)"
        if line is not None:
            raise UsageError(line)
        self.cfg, self.instance, self.loaded = cfg, instance, loaded
        self.label = instance.label
        self.baseline = "" if is_baseline(instance.label) else baseline_of(instance.name)
        self.budget = instance.budget_in(cfg.budget.block_complexity)
        self.planned = method  # a planned (or planned and bound) method the caller made, else planned here
        if self.planned is None and self.budget not in (AUTO, ADAPTIVE):
            from specbench_cli.run.plan import plan_instance

            self.planned = plan_instance(cfg, instance, int(self.budget))
        self.method: Any = None       # the bound method: never drafts; every sequence's drafter is a copy
        self.bound_at: Optional[int] = None
        self.pool: list[Any] = []     # drafters free to take
        self.drafters: list[Any] = []  # every drafter made from the method
        self.seen: dict[int, int] = {}  # id(drafter) -> how many of `answers` it remembers
        self.answers: list[list[int]] = []  # the answers of the current pass (`remember`)
        self.references: dict[tuple[int, ...], list[int]] = {}
        self.decoder: Any = None

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """The decoder on the loaded target, and the method bound when its budget is known."""
        from specbench_cli.decoding.decoder import Decoder
        from specbench_cli.models.prompting import stop_token_ids
        from specbench_cli.run.plan import method_context

        lm = self.loaded
        self.sampling = method_context(self.cfg).sampling
        self.decoder = Decoder(lm.target, stop_token_ids(lm.tokenizer, lm.target), self.sampling)
        if self.planned is not None:
            self._bind(self.planned)

    def stop(self) -> None:
        for d in [*self.drafters, self.method]:
            close = getattr(d, "close", None)
            if close is not None:
                close()
        self.pool, self.drafters, self.seen, self.method = [], [], {}, None

    def reference(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> None:
        """The AR answer to `prompt_ids` (a reference-drafting method's, synthetic's, reference)."""
        self.references[tuple(prompt_ids)] = list(output_ids)
        if self.method is not None and getattr(self.method, "reference_drafts", False):
            self.method.refer(list(prompt_ids), list(output_ids))

    # -- drafters ---------------------------------------------------------------------------
    def _bind(self, planned: Any) -> None:
        lm = self.loaded
        if getattr(planned, "decodes_itself", False):
            raise UsageError(f"{self.label}: an engine's own speculation does not run in specbench's own loop")
        if planned.ctx.target is None:
            planned.ctx = dataclasses.replace(planned.ctx, trust_remote_code=getattr(lm, "trust_remote_code", False))
            planned = planned.bind(lm.target, lm.tokenizer)
        self.stop()
        self.method, self.bound_at = planned, planned.ctx.budget
        if getattr(planned, "reference_drafts", False):
            for prompt, out in self.references.items():
                planned.refer(list(prompt), list(out))

    def _at(self, budget: Optional[int]) -> None:
        """The method bound at the point's block complexity `budget` (None: the run's)."""
        if budget is None:
            if self.method is None:
                raise UsageError(f"{self.label}: a budget of '{self.budget}' needs a planned and calibrated method "
                                 "or a block complexity per load point in specbench's own loop")
            return
        if self.method is not None and self.bound_at == budget:
            return
        from specbench_cli.run.plan import adaptive_ceiling, plan_instance

        if budget == ADAPTIVE:
            at = self.cfg.with_(block_complexity=ADAPTIVE)
            if is_baseline(self.instance.name):  # the baseline drafts nothing: bound at the ceiling
                self._bind(plan_instance(at, self.instance, adaptive_ceiling(at)))
            else:
                self._bind(self._calibrated(at))
            self.bound_at = budget
            return
        self._bind(plan_instance(self.cfg, self.instance, budget))

    def _calibrated(self, at: RunConfig) -> Any:
        """The method with its adaptive budget calibrated on this machine as `specbench run --bc
        adaptive` calibrates it (the cost curve, then the calibration prompts; run/auto/calibrate.py),
        before the point's clock starts."""
        import torch

        from specbench_cli.run.auto.calibrate import prepare
        from specbench_cli.run.plan import adaptive_ceiling, load_questions, plan_instance

        planned = {self.instance: plan_instance(at, self.instance, adaptive_ceiling(at))}
        planned, _ = prepare(at, self.loaded, planned, load_questions(at), at.model.threads or torch.get_num_threads())
        return planned[self.instance]

    def _make(self) -> Any:
        """A new drafter: a copy of the bound method, which never drafts itself (so nothing of a
        generation is copied: run/replicas.py), remembering this pass's answers."""
        from specbench_cli.run.replicas import copy_drafter

        twin = copy_drafter(self.method)
        if twin is None:  # a method that cannot be copied: planned and bound again
            from specbench_cli.run.plan import plan_instance

            twin = plan_instance(self.cfg, self.instance, self.method.ctx.budget)
            twin.ctx = dataclasses.replace(twin.ctx, trust_remote_code=self.method.ctx.trust_remote_code)
            twin = twin.bind(self.loaded.target, self.loaded.tokenizer)
        adaptive = getattr(self.method.ctx, "adaptive", None)
        if adaptive is not None:  # the frozen policy, its own answer counts
            twin.ctx = dataclasses.replace(twin.ctx, adaptive=adaptive.fork())
        self.drafters.append(twin)
        self.seen[id(twin)] = 0
        return twin

    def _take(self) -> Any:
        """A free drafter (made when none is), told the answers it has not seen yet."""
        d = self.pool.pop() if self.pool else self._make()
        for ids in self.answers[self.seen[id(d)]:]:
            d.remember(list(ids))
        self.seen[id(d)] = len(self.answers)
        return d

    def _reserve(self, n: int) -> None:
        """At least `n` drafters made (before a point's clock starts)."""
        while len(self.drafters) < n:
            self.pool.append(self._make())

    def _forget(self) -> None:
        """A pass starts (a point, its warm-up): no drafter remembers an earlier answer."""
        self.answers = []
        for d in self.drafters:
            d.forget()
            self.seen[id(d)] = 0

    # -- serving ----------------------------------------------------------------------------
    def serve(self, point: LoadPoint, trace: Sequence[TraceRequest],
              record: Callable[[RequestRecord], None]) -> None:
        self._at(point.block_complexity if point.block_complexity is not None else
                 (None if self.budget in (AUTO, ADAPTIVE) else int(self.budget)))
        warmup = [r for r in trace if r.index < 0]
        measured = sorted((r for r in trace if r.index >= 0), key=lambda r: r.index)[:point.max_requests]
        if getattr(self.method, "reference_drafts", False):
            self._references([*warmup, *measured])
        self._reserve(int(point.level) if point.mode == "concurrency" else 1)
        if warmup:
            self._forget()
            self._serve(point, sorted(warmup, key=lambda r: -r.index), None)
        self._forget()
        self._serve(point, measured, record)

    def _references(self, trace: Sequence[TraceRequest]) -> None:
        """AR's answer to every prompt of `trace` not yet known, decoded in static batches (before
        the point's clock starts), handed to the method."""
        from specbench_cli import methods
        from specbench_cli.run.plan import method_context
        from specbench_cli.run.runner import sample_seed

        eos = self.decoder.eos_ids
        todo: dict[tuple[int, ...], TraceRequest] = {}
        for r in trace:  # a reference too short for a request's cap (and not ended) is decoded again
            key, ref = tuple(r.prompt_ids), self.references.get(tuple(r.prompt_ids))
            if ref is not None and (len(ref) >= r.max_new_tokens or (ref and ref[-1] in eos)):
                continue
            if key not in todo or todo[key].max_new_tokens < r.max_new_tokens:
                todo[key] = r
        reqs = list(todo.values())
        if not reqs:
            return
        import torch

        ctx = method_context(self.cfg, self.loaded.target, self.loaded.tokenizer, budget=1)
        for lo in range(0, len(reqs), REFERENCE_BATCH):
            part = reqs[lo:lo + REFERENCE_BATCH]
            gens = None if self.sampling.greedy else [
                torch.Generator().manual_seed(sample_seed(self.cfg.decoding.seed, r.question_id, r.turn, 0)) for r in part]
            out = self.decoder.generate_batch([methods.get("ar").create(ctx) for _ in part],
                                              [list(r.prompt_ids) for r in part],
                                              [r.max_new_tokens for r in part], 1, gens)
            for r, g in zip(part, out):
                self.reference(r.prompt_ids, g.output_ids)

    def _serve(self, point: LoadPoint, queue: list[TraceRequest],
               record: Optional[Callable[[RequestRecord], None]]) -> None:
        """The scheduler (module doc) over `queue`, in order; `record` None: a warm-up phase
        (sent at once at the point's concurrency, nothing recorded, no time limit)."""
        import torch

        from specbench_cli.decoding.continuous import ContinuousBatch
        from specbench_cli.decoding.decoder import wants
        from specbench_cli.run.runner import sample_seed

        warm = record is None
        closed = point.mode == "concurrency" or warm
        level = max(1, int(point.level)) if point.mode == "concurrency" else max(1, len(queue))
        batch = ContinuousBatch(self.decoder, self.method.ctx.budget, wants(self.method))
        flight: dict[int, tuple[RequestRecord, Any]] = {}  # request index -> (its record, its drafter)
        pending = list(queue)
        t0 = time.perf_counter()
        stopped = False

        def clock() -> float:
            return time.perf_counter() - t0

        def deliver(emitted: list, now: float, size: Optional[int]) -> None:
            for e in emitted:
                rec, drafter = flight[e.key]
                if size is not None:
                    rec.batch_sizes.append(size)
                if e.tokens:
                    if rec.first_token_s is None:
                        rec.first_token_s = now
                    rec.token_times_s.extend([now] * len(e.tokens))
                if e.done is not None:
                    finish(e.key, rec, drafter, e.done, now)

        def finish(key: int, rec: RequestRecord, drafter: Any, gen: Any, now: float) -> None:
            del flight[key]
            self.pool.append(drafter)
            fill(rec, gen, now)
            if gen.output_ids:  # remembered by each drafter when it next takes a request
                self.answers.append(list(gen.output_ids))
            if record is not None:
                record(rec)

        def fail(error: BaseException, now: float) -> None:
            line = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            for key, (rec, drafter) in list(flight.items()):
                del flight[key]
                self.pool.append(drafter)
                rec.error, rec.end_s = line, now
                if record is not None:
                    record(rec)

        while pending or flight:
            now = clock()
            if not warm and now >= point.time_limit_s:
                stopped = True
            admitted = False
            while pending and not stopped:
                r = pending[0]
                if closed and len(flight) >= level:
                    break
                if not closed and (r.send_s or 0.0) > now:
                    break
                pending.pop(0)
                drafter = self._take()
                rec = self._record(point, r, (r.send_s if not closed else now))
                flight[r.index] = (rec, drafter)
                gen = torch.Generator().manual_seed(sample_seed(self.cfg.decoding.seed, r.question_id, r.turn, 0)) \
                    if not self.sampling.greedy else None
                try:
                    emitted = batch.join(r.index, drafter, list(r.prompt_ids), r.max_new_tokens, gen,
                                         getattr(drafter.ctx, "adaptive", None))
                except Exception as e:  # noqa: BLE001 - the batch's requests end as error rows; serving goes on
                    fail(e, clock())
                    batch = ContinuousBatch(self.decoder, self.method.ctx.budget, wants(self.method))
                    continue
                deliver([emitted], clock(), None)
                admitted = True
            if stopped and pending:
                pending = []
            if not flight:
                if not pending:
                    break
                if not closed and not admitted:  # nothing in flight: wait for the next arrival
                    wait = min(pending[0].send_s or 0.0, point.time_limit_s) - clock()
                    if wait > 0:
                        time.sleep(wait)
                continue
            size = len(batch)
            try:
                emitted = batch.step()
            except Exception as e:  # noqa: BLE001 - as above
                fail(e, clock())
                batch = ContinuousBatch(self.decoder, self.method.ctx.budget, wants(self.method))
                continue
            deliver(emitted, clock(), size)

    def _record(self, point: LoadPoint, r: TraceRequest, send_s: Optional[float]) -> RequestRecord:
        return RequestRecord(point=point.name, method=self.label, baseline=self.baseline,
                             speculative=not is_baseline(self.label), index=r.index, question_id=r.question_id,
                             category=r.category, turn=r.turn, send_s=send_s, token_times_s=[], streamed=True,
                             prompt_tokens=len(r.prompt_ids), acceptance_source="loop", batch_sizes=[],
                             extra={"block_complexity": self.method.ctx.budget})


def fill(rec: RequestRecord, gen: Any, now: float) -> None:
    """A finished request's record from its `Generation` (decoding/decoder.py): its answer and
    what each verification step drafted and accepted."""
    rec.end_s = now
    rec.output_ids = list(gen.output_ids)
    rec.new_tokens = len(gen.output_ids)
    lengths = [int(a) for a in gen.accept_lengths]
    rec.steps = len(lengths)
    rec.accept_lengths = lengths
    rec.drafted = int(sum(gen.draft_sizes))
    rec.accepted = int(sum(max(a - 1, 0) for a in lengths))
    rec.draft_path_lengths = [int(p) for p in gen.draft_path_lengths]
    depth = max(gen.draft_depths, default=0)
    rec.drafted_by_position = [sum(1 for d in gen.draft_depths if d > k) for k in range(depth)]
    rec.accepted_by_position = [sum(1 for a in lengths if a - 1 > k) for k in range(depth)]
    if gen.stats:
        rec.extra["method_stats"] = gen.stats
