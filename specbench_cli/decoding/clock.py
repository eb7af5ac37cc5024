"""The decoding loop's clock (`decoding/decoder.py`): every time a `Generation` records, read at named
marks of the loop, so that the loop reads as the algorithm and its timing reads in one place.

Every reading is `time.perf_counter()`. `prefill_time` is the time until decoding starts (every
prompt's prefill), `wall_time` runs from the batch's start to the sequence's finish (plus its
epilogue); per step a sequence's drafting time is its own drafter's (propose + observe), its
verify time the shared forward's and the verdicts', and its overhead the rest of the step
(building the forward's inputs, the cache commit, the other sequences' drafting). Where the
split is asked for (`split`: always on a CPU, where reading the clock is all it costs; on CUDA
only with `time_steps`, since each part's end must then wait for the device: `part_sync`) each
step is also cut into its parts: the drafter's `propose` and `observe` (its own), the target's
forward (`Target.verify` from `Forward.started` to its return), the acceptance (every live
sequence's verdict), the cache commit (`Target.commit`); the rest of the decode time (building
the forward's inputs, bookkeeping, leaving, the other sequences' drafting) is what reports call
"other" (docs/metrics.md).

A step's marks, in the loop's order:

    step()                      the step starts
    own()                       a drafter's own work starts (its propose, later its observe)
    mark("propose")             that drafter's propose (and the budget's choice) ended
    mark("forward", started)    the target's forward returned; it ran from `started`
    mark("accept")              every live sequence's verdict is known
    mark("commit")              the target's cache holds the accepted paths
    mark("observe")             a drafter's observe ended (drafters observe in row order)
    record(gens)                the step ends: each live row's times into its Generation

With `part_sync` the marks after device work (`SYNCED`) first wait for the device; the
acceptance needs no wait (its one transfer to the host already waited). Besides those, the
clock waits for the device where a time must include all queued work: the batch's start, a
sequence leaving, the end of the batch and of each epilogue (`read(wait=True)`).
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from specbench_cli.lazy import torch

SYNCED = frozenset({"propose", "forward", "commit", "observe"})  # marks that end device work


def sync(device: Any) -> None:
    """Wait for everything queued on `device` (a CUDA device; nothing to wait for elsewhere)."""
    if getattr(device, "type", None) == "cuda":
        torch.cuda.synchronize(device)


class StepClock:
    """One decoder's clock: the device's sync policy, the batch's start and each sequence's end,
    and the current step's marks (module doc). One batch at a time; what it records goes into
    each sequence's `Generation` (decoding/decoder.py; `gens`)."""

    def __init__(self, device: Any, time_steps: bool = False) -> None:
        kind = getattr(device, "type", None)
        self.device = device
        # each step cut into its parts (module doc): free on a CPU; on CUDA only when asked for,
        # since every part's end then waits for the device
        self.split = kind in (None, "cpu") or (bool(time_steps) and kind == "cuda")
        self.part_sync = bool(time_steps) and kind == "cuda"
        self._start = 0.0
        self._ended: list[float] = []
        self._step = self._own = 0.0
        self._marks: dict[str, float] = {}
        self._started = 0.0
        self._propose: list[float] = []
        self._observe: list[float] = []

    def read(self, wait: bool = False) -> float:
        """The clock now, after waiting for the device when `wait`."""
        if wait:
            sync(self.device)
        return time.perf_counter()

    # -- the batch ------------------------------------------------------------------------
    def start(self, gens: Sequence[Any]) -> None:
        """The batch starts (once the device is idle)."""
        self._start = self.read(wait=True)
        self._ended = [0.0] * len(gens)

    def prefilled(self, gens: Sequence[Any]) -> None:
        """Every prompt is prefilled: decoding starts. Where the split is measured its totals
        start at zero (elsewhere they stay None: not measured)."""
        now = time.perf_counter()
        for g in gens:
            g.prefill_time = now - self._start
        if self.split:
            for g in gens:
                g.propose_time = g.forward_time = g.accept_time = g.commit_time = g.observe_time = 0.0

    def leave(self, seqs: Sequence[int]) -> None:
        """Sequences `seqs` (their indices in the batch) finish now (once their work is done)."""
        when = self.read(wait=True)
        for b in seqs:
            self._ended[b] = when

    def wall(self, b: int, extra: float = 0.0) -> float:
        """Sequence `b`'s wall time: from the batch's start to its finish, plus `extra` (its
        epilogue's time)."""
        return self._ended[b] - self._start + extra

    # -- a step ---------------------------------------------------------------------------
    def step(self) -> None:
        """A step starts."""
        self._step = time.perf_counter()
        self._propose, self._observe = [], []

    def own(self) -> None:
        """A drafter's own work (its propose or its observe) starts."""
        self._own = time.perf_counter()

    def mark(self, name: str, started: Optional[float] = None) -> None:
        """The step's part `name` ended (module doc); `started`: the forward's own start
        (`Forward.started`), for `"forward"`."""
        if self.part_sync and name in SYNCED:
            sync(self.device)
        now = time.perf_counter()
        if name == "propose":
            self._propose.append(now - self._own)
        elif name == "observe":
            self._observe.append(now - self._own)
        else:
            self._marks[name] = now
            if started is not None:
                self._started = started

    def record(self, gens: Sequence[Any]) -> None:
        """The step ends: each live row's times (`gens[r]`: row r's Generation) recorded."""
        end = time.perf_counter()
        started, t1, t2, t3 = self._started, self._marks["forward"], self._marks["accept"], self._marks["commit"]
        verifying = t2 - started
        forward, accept, commit = t1 - started, t2 - t1, t3 - t2
        for g, proposing, observing in zip(gens, self._propose, self._observe):
            own = proposing + observing
            g.step_draft_ms.append(round(1000 * own, 3))
            g.step_verify_ms.append(round(1000 * verifying, 3))
            g.draft_time += own
            g.verify_time += verifying
            g.overhead_time += (end - self._step) - own - verifying
            if self.split:  # own = propose + observe, verifying = forward + accept
                observe = own - proposing
                g.step_propose_ms.append(round(1000 * proposing, 3))
                g.step_forward_ms.append(round(1000 * forward, 3))
                g.step_accept_ms.append(round(1000 * accept, 3))
                g.step_commit_ms.append(round(1000 * commit, 3))
                g.step_observe_ms.append(round(1000 * observe, 3))
                g.propose_time += proposing
                g.forward_time += forward
                g.accept_time += accept
                g.commit_time += commit
                g.observe_time += observe
