"""A per-step adaptive budget: how much of a drafter's proposal one step verifies.

A fixed block complexity verifies whatever the drafter proposes up to BC - 1 nodes, whether
the drafter is sure (a 20-token match in the prompt) or guessing (a 1-token match). But a
forward over q tokens costs more the larger q is (on a CPU, t(10) is about 1.3-2 x t(1)), so
a node worth verifying is one whose chance of being accepted pays for the extra forward time.
This module chooses, each step, the part of the draft that maximises the decode's expected
tokens per second:

    E[tokens](S) = 1 + sum over nodes i in S of P(i accepted)
    choose S (ancestor-closed, |S| = k) maximising E[tokens](S) - lambda (d + T(1 + k))

with lambda the decode's own tokens per ms (measured in calibration with the older per-step rule,
maximising E[tokens](S) / (d + T(1 + k)), which is used when lambda is 0). Maximising a sum of
tokens over a sum of milliseconds is maximising tokens - lambda x ms at each step, lambda the
best achievable ratio (Dinkelbach); the per-step ratio instead keeps too little of a step that
is going well and too much of one that is not.

with `T(q)` the step's measured cost at q tokens (target forward, verdict, cache commit and the
loop's bookkeeping: everything but drafting) and `d` the drafter's measured cost per step. As in
SuffixDecoding's score-ranked speculation trees and the dynamic draft-length methods (SpecDec++
stops a draft where the predicted acceptance falls below a threshold; DISCO predicts when to stop),
acceptance is predicted from the drafter's own signal, but nothing is trained:

- a drafter may label each node with a small integer, its *signal class* (`Draft.signal`): the
  length of the n-gram it matched (pld), of the suffix-automaton match (samd), the node's
  frequency-estimated probability in tenths (suffix), its rank among the recycled candidates
  (recycling). Nodes without a label are class 0.
- `AcceptanceTable` counts, per (class, depth), how often a node was accepted when its parent was:
  the node's conditional acceptance rate, smoothed (a few pseudo-counts) towards the class's rate
  over every depth, and that towards the overall rate, so a depth seen rarely in a class borrows
  from the class (a 9-token suffix-automaton match is as good at depth 7 as at depth 3, and far
  better than a fallback's sibling candidates at any depth); a class never seen takes its depth's
  rate over every class. P(i accepted) is the product of the rates along i's path.
- with `history` on, a node's class is also split by how the previous step's verification ended
  (`outcome`): nothing drafted or nothing accepted, accepted in part, or accepted down to a leaf
  of the draft (a chain taken whole). A retrieval drafter that has just had a whole chain accepted
  is copying, and its next chain is accepted far more often (samd on Spec-Bench: 6.5 of 8.5 draft
  tokens after a whole chain, 1.5 after a rejected first token). The class stays the drafter's;
  the split is the budget's, so it holds for any drafter.
- nodes are taken in order of P (a child never before its parent: its P is at most its parent's,
  ties go to the lower index), and k is the best prefix of that order.

The table is learned on the calibration questions from *whole* drafts at the largest budget
(every node verified, so every depth is seen), then frozen. Calibration answers are short and
come from other questions, so on a reported answer the frozen rates are off (measured: too low
where an answer keeps repeating its context, which is where drafting pays). Each answer therefore
also learns from its own verified steps (`online` > 0): per signal class, the ratio of the nodes
it accepted to those the frozen rates expected, (A_c + K) / (E_c + K) with K = `online`, scales
the class's rates, and a (class, depth) cell the answer has already verified moves towards its
own counts, (a + K r) / (o + K) with r the scaled frozen rate. The answer's counts start empty at
each answer, so the choice is a function of the frozen table, the draft and this answer's
earlier steps only: a resumed run, a batch row and an uninterrupted run choose alike. Trimming a
draft never changes which tokens the target accepts among the kept ones, so a lossless method
stays lossless.

Counting only the verified part would censor the answer's own counts: a depth the rule trims
is never verified, so its rate could only move through its class's ratio, and a rule that has
learned to stop early keeps stopping early. With `hindsight` on, every node of the *whole*
proposal (trimmed nodes included) is counted once the answer's tokens reach its depth: it was
offered when its parent's path equals the tokens the answer went on to produce, and accepted
when its own token does too. Under greedy decoding that is exactly what verifying the whole
draft would have counted (the target's tokens do not depend on what was drafted); when sampling,
a node on the sampled path is counted accepted, which has the same expectation as a
deterministic draft token's acceptance, p(token). Nodes past the end of the answer are never
counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from specbench_cli.decoding.draft import Draft, depths

PRIOR = 4.0        # pseudo-counts with which a (class, depth) rate leans on its depth's rate
MAX_DEPTH = 32     # deeper nodes share the last depth's counts
ONLINE = 8.0       # pseudo-counts with which an answer's own counts lean on the frozen rates
MAX_RATE = 0.99    # a scaled rate never reaches certainty
OUTCOMES = 3       # how the previous step ended (`outcome`): the split of each class under `history`


def outcome(draft: Draft, accepted: Sequence[int]) -> int:
    """How a verification ended: 0 nothing drafted or nothing accepted, 1 accepted in part, 2 the
    accepted path reached a leaf of the draft (every node of a chain)."""
    if not len(draft) or not len(accepted):
        return 0
    return 1 if accepted[-1] in draft.parents else 2


@dataclass
class AcceptanceTable:
    """Offered/accepted counts per (signal class, depth); see the module doc."""

    counts: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    prior: float = PRIOR

    def learn(self, draft: Draft, accepted: Sequence[int], classes: Optional[Sequence[int]] = None) -> None:
        """Count one verified draft: a node is *offered* when its parent is the root or was
        accepted; `accepted` are the accepted node indices (root excluded); `classes` each node's
        class (default: the draft's signal)."""
        if not len(draft):
            return
        taken = set(accepted)
        signal = classes if classes is not None else (draft.signal or [0] * len(draft))
        for i, (p, d) in enumerate(zip(draft.parents, depths(tuple(draft.parents)))):
            if p < 0 or p in taken:
                c = self.counts.setdefault((int(signal[i]), min(d, MAX_DEPTH)), [0, 0])
                c[0] += 1
                c[1] += i in taken

    def _pooled(self, signal: Optional[int] = None, depth: Optional[int] = None) -> tuple[int, int]:
        off = acc = 0
        for (s, d), (o, a) in self.counts.items():
            if (signal is None or s == signal) and (depth is None or d == depth):
                off, acc = off + o, acc + a
        return off, acc

    def rates(self) -> dict[tuple[int, int], float]:
        """The smoothed rate of every (class, depth) seen, plus (class, -1) for each class over
        every depth, (-1, depth) for each depth over every class and (-1, 0) overall: what `rate`
        answers for a depth or class never seen."""
        off, acc = self._pooled()
        overall = (acc + 0.5) / (off + 1.0)  # no counts at all: one half
        out = {(-1, 0): overall}
        for d in sorted({d for _, d in self.counts}):
            o, a = self._pooled(depth=d)
            out[(-1, d)] = (a + self.prior * overall) / (o + self.prior)
        for c in sorted({c for c, _ in self.counts}):
            o, a = self._pooled(signal=c)
            out[(c, -1)] = (a + self.prior * overall) / (o + self.prior)
        for (c, d), (o, a) in self.counts.items():
            out[(c, d)] = (a + self.prior * out[(c, -1)]) / (o + self.prior)
        return out

    def to_dict(self) -> dict:
        return {"prior": self.prior,
                "counts": [[s, d, o, a] for (s, d), (o, a) in sorted(self.counts.items())]}

    @classmethod
    def from_dict(cls, data: dict) -> "AcceptanceTable":
        counts = {}
        for row in data.get("counts", []):
            if (not isinstance(row, list) or len(row) != 4
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in row)
                    or not (row[1] >= 1 and 0 <= row[3] <= row[2])):
                raise ValueError("adaptive budget: every count must be [class, depth >= 1, offered, accepted <= offered]")
            counts[(row[0], row[1])] = [row[2], row[3]]
        prior = data.get("prior", PRIOR)
        if isinstance(prior, bool) or not isinstance(prior, (int, float)) or not prior > 0:
            raise ValueError("adaptive budget: 'prior' must be a positive number")
        return cls(counts, float(prior))


@dataclass
class _Pending:
    """A whole proposal waiting for the answer's tokens to reach its nodes (`hindsight`): the
    number of the answer's tokens before its first node, its nodes and classes, and per node
    None (not resolved yet), True (on the answer's path) or False (off it, or its parent was)."""

    start: int
    tokens: list[int]
    parents: list[int]
    depths: tuple[int, ...]
    classes: list[int]
    state: list[Optional[bool]]


class AdaptiveBudget:
    """Chooses each step's part of a draft (module doc). `step_ms[q - 1]` is T(q) for
    q = 1..len(step_ms) (larger q: the last slope); `draft_ms` the drafter's cost per step.
    `learning` (calibration): every draft is verified whole and counted; otherwise the table is
    frozen and drafts are trimmed. `history`: classes are split by the previous step's `outcome`
    (a table learned with it must be used with it: the manifest records which). `hindsight`: an
    answer's own counts cover every proposed node, trimmed ones included, resolved against the
    tokens the answer goes on to produce (module doc)."""

    def __init__(self, table: AcceptanceTable, step_ms: Sequence[float], draft_ms: float = 0.0,
                 learning: bool = False, online: float = 0.0, history: bool = False,
                 rate_per_ms: float = 0.0, hindsight: bool = False) -> None:
        if not step_ms or any(not v > 0 for v in step_ms):
            raise ValueError("adaptive budget: step costs must be positive")
        if isinstance(online, bool) or not isinstance(online, (int, float)) or online < 0:
            raise ValueError("adaptive budget: 'online' must be a number >= 0")
        self.table, self.step_ms, self.draft_ms, self.learning = table, list(step_ms), float(draft_ms), learning
        self.online = float(online)
        self.history = bool(history)
        if isinstance(rate_per_ms, bool) or not isinstance(rate_per_ms, (int, float)) or not rate_per_ms >= 0:
            raise ValueError("adaptive budget: 'rate_per_ms' must be a number >= 0")
        self.rate_per_ms = float(rate_per_ms)  # 0: the per-step ratio rule (`plan`)
        if not isinstance(hindsight, bool):
            raise ValueError("adaptive budget: 'hindsight' must be true or false")
        self.hindsight = hindsight
        self._rates = table.rates()
        self.begin()

    def begin(self) -> None:
        """A new answer: forget the previous answer's own counts (module doc)."""
        self.live: dict[tuple[int, int], list[int]] = {}   # (class, depth) -> [offered, accepted]
        self.expected: dict[int, list[float]] = {}         # class -> [frozen-rate expectation, accepted]
        self.last = 0                                      # the previous step's outcome (a new answer: 0)
        self.realized: list[int] = []                      # the answer's tokens so far (`hindsight`)
        self.pending: list[_Pending] = []                  # whole proposals not yet resolved (`hindsight`)

    def classes(self, draft: Draft) -> list[int]:
        """Each node's class: the drafter's signal, split by the previous step's outcome under
        `history` (signal x OUTCOMES + outcome)."""
        signal = draft.signal or [0] * len(draft)
        if not self.history:
            return [int(s) for s in signal]
        return [int(s) * OUTCOMES + self.last for s in signal]

    def fork(self) -> "AdaptiveBudget":
        """The same frozen policy with counts of its own (another row of a batch)."""
        twin = AdaptiveBudget(self.table, self.step_ms, self.draft_ms, self.learning, self.online, self.history,
                              self.rate_per_ms, self.hindsight)
        twin._rates = self._rates
        return twin

    def cost(self, q: int) -> float:
        ms = self.step_ms
        if q <= len(ms):
            return ms[q - 1]
        slope = max(ms[-1] - ms[-2], 0.0) if len(ms) > 1 else ms[-1]
        return ms[-1] + slope * (q - len(ms))

    def frozen_rate(self, signal: int, depth: int) -> float:
        """The calibrated rate of a (class, depth) cell, smoothed as the module doc says."""
        d = min(depth, MAX_DEPTH)
        r = self._rates
        found = r.get((signal, d))
        if found is None:
            found = r.get((signal, -1))  # a depth this class never reached: the class's own rate
        if found is None:
            found = r.get((-1, d), r[(-1, 0)])  # a class never seen: the depth's rate over every class
        return found

    def rate(self, signal: int, depth: int) -> float:
        """The rate a node of this cell is predicted to be accepted at, this answer's counts included."""
        base = self.frozen_rate(signal, depth)
        if not self.online or self.learning:
            return base
        k = self.online
        e = self.expected.get(signal)
        scaled = min(MAX_RATE, base * (e[1] + k) / (e[0] + k)) if e else base
        own = self.live.get((signal, min(depth, MAX_DEPTH)))
        return (own[1] + k * scaled) / (own[0] + k) if own else scaled

    def accept_probs(self, draft: Draft) -> list[float]:
        """P(node i accepted) for every node: the product of the rates along its path."""
        signal = self.classes(draft)
        out: list[float] = []
        for i, (p, d) in enumerate(zip(draft.parents, depths(tuple(draft.parents)))):
            out.append((1.0 if p < 0 else out[p]) * self.rate(signal[i], d))
        return out

    def plan(self, draft: Draft) -> tuple[list[int], float]:
        """(the kept node indices in draft order, the expected tokens per ms of that choice).

        Without `rate_per_ms`: the prefix with the best expected tokens per ms of this step alone.
        With it (lambda, the decode's tokens per ms): the prefix with the largest
        E[tokens] - lambda x cost, the step that adds most to the whole decode's tokens per ms
        (Dinkelbach): a node is worth verifying when what it adds, P(accepted), beats what its
        forward time would earn at the decode's own rate. The per-step ratio compares a node
        with its own step instead: it keeps too little of a step that is going well (a chain
        whose first tokens are near-certain) and too much of one that is not."""
        probs = self.accept_probs(draft)
        order = sorted(range(len(draft)), key=lambda i: (-probs[i], i))
        lam = self.rate_per_ms

        def score(expected: float, q: int) -> float:
            ms = self.draft_ms + self.cost(q)
            return expected - lam * ms if lam else expected / ms

        best_k, best, expected = 0, score(1.0, 1), 1.0
        for k, i in enumerate(order, start=1):
            expected += probs[i]
            value = score(expected, 1 + k)
            if value > best:
                best_k, best = k, value
        kept = 1.0 + sum(probs[i] for i in order[:best_k])
        return sorted(order[:best_k]), kept / (self.draft_ms + self.cost(1 + best_k))

    def _counts_in_hindsight(self) -> bool:
        return self.hindsight and bool(self.online) and not self.learning

    def choose(self, draft: Draft) -> Draft:
        """The part of `draft` to verify this step (the whole draft while learning)."""
        if self.learning or not len(draft):
            return draft
        if self._counts_in_hindsight():  # the whole proposal, resolved as the answer's tokens arrive
            self.pending.append(_Pending(len(self.realized), list(draft.tokens), list(draft.parents),
                                         depths(tuple(draft.parents)), self.classes(draft), [None] * len(draft)))
        keep, _ = self.plan(draft)
        return subdraft(draft, keep) if len(keep) < len(draft) else draft

    def observe(self, draft: Draft, accepted: Sequence[int], new_tokens: Optional[Sequence[int]] = None) -> None:
        """One verified step: the kept `draft`, its `accepted` node indices and the step's
        `new_tokens` (accepted + the target's own). Without `new_tokens` the answer's counts come
        from the verified nodes alone, as without `hindsight`."""
        if new_tokens is not None and self._counts_in_hindsight():
            self.realized.extend(int(t) for t in new_tokens)
            self._resolve()
        else:
            self._count(draft, accepted)
        self.last = outcome(draft, accepted)  # after counting: this step's classes used the previous outcome

    def _count(self, draft: Draft, accepted: Sequence[int]) -> None:
        if self.learning:
            self.table.learn(draft, accepted, self.classes(draft))
            return
        if not self.online or not len(draft):
            return
        taken = set(accepted)
        signal = self.classes(draft)
        for i, (p, d) in enumerate(zip(draft.parents, depths(tuple(draft.parents)))):
            if p < 0 or p in taken:  # offered: as AcceptanceTable.learn counts
                self._tally(signal[i], d, i in taken)

    def _tally(self, c: int, d: int, hit: bool) -> None:
        """One offered node of class `c` at depth `d` in this answer's own counts."""
        cell = self.live.setdefault((c, min(d, MAX_DEPTH)), [0, 0])
        cell[0] += 1
        cell[1] += hit
        e = self.expected.setdefault(c, [0.0, 0.0])
        e[0] += self.frozen_rate(c, d)
        e[1] += hit

    def _resolve(self) -> None:
        """Count every pending node the answer's tokens now reach (parents precede children, so
        one pass in node order settles each node whose parent is settled)."""
        still = []
        for p in self.pending:
            have = len(self.realized) - p.start   # the answer's tokens after this proposal's root
            for i, par in enumerate(p.parents):
                if p.state[i] is not None:
                    continue
                if par >= 0 and p.state[par] is not True:
                    if p.state[par] is False:
                        p.state[i] = False        # off the path: never offered
                    continue
                d = p.depths[i]
                if d > have:
                    continue
                p.state[i] = p.tokens[i] == self.realized[p.start + d - 1]
                self._tally(p.classes[i], d, p.state[i])
            if None in p.state:
                still.append(p)
        self.pending = still

    def freeze(self) -> None:
        """Stop learning: the table as it is decides every later step."""
        self.learning = False
        self._rates = self.table.rates()


def subdraft(draft: Draft, keep: Sequence[int]) -> Draft:
    """The draft restricted to the ancestor-closed node set `keep` (indices in increasing order),
    re-indexed; per-node fields (probabilities, signal) follow their nodes."""
    index = {old: new for new, old in enumerate(keep)}
    parents = []
    for i in keep:
        p = draft.parents[i]
        if p >= 0 and p not in index:
            raise ValueError(f"node {i} kept without its parent {p}")
        parents.append(-1 if p < 0 else index[p])
    if draft.acceptable is not None or draft.embeds:
        raise ValueError("an adaptive budget trims plain drafts only (no input-only nodes, no embeddings)")
    probs = draft.probs[list(keep)] if draft.probs is not None else None
    signal = [draft.signal[i] for i in keep] if draft.signal is not None else None
    return Draft(tokens=[draft.tokens[i] for i in keep], parents=parents, probs=probs, signal=signal)
