"""`--block-complexity auto` and per-method budgets (`--methods pld,pld@auto,lookahead@16`).

The rule (docs/block-complexity-auto.md has the reasons):

- a method *instance* is `NAME` (the run's `--block-complexity`), `NAME@N` (budget N) or
  `NAME@auto` (a `MethodInstance`, config/instance.py); with `--block-complexity auto` every
  plain NAME except `ar` is `@auto`;
- for each auto instance, before any reported question, the method decodes a few
  *calibration* questions (the built-in `mini` suite's, never one of the run's questions) at
  every candidate budget its plan accepts; each step i of that profile used `q_i` target
  tokens, added `a_i` tokens to the output and spent `d_i` ms drafting;
- predicted throughput at budget b = sum(a_i) / sum(t(q_i) + d_i + o), with t(q) the device's
  cost curve (specbench_cli/run/auto/cost.py) and o the loop's per-step overhead, both measured;
- at batch size N the curve is t(N, q) (one forward over N sequences) and every step also pays
  N drafters and N sequences' overhead: predicted throughput (summed over the batch) =
  N sum(a_i) / sum(t(N, q_i) + N (d_i + o)). The profiles are decoded one sequence at a time
  (acceptance does not depend on N); the best budget per N follows from the curve at that N;
- the instance runs the reported questions at the budget with the highest prediction (ties:
  the smaller budget). The choice and every candidate's numbers go into the manifest.

The choice itself (`predicted_tokens_per_s`, `choose_budget`) is a pure function of a curve
and profiles, so it is tested on synthetic numbers.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from specbench_cli.errors import UsageError

DEFAULT_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24)
CALIBRATION_TASK = "mini"
CURVE_CONTEXT = 400         # the cost curve's context length (the `specbench cost` default)
CURVE_ROUNDS = 5
MIN_GAIN = 0.05             # a drafting budget must be predicted this much faster than BC 1
TIE = 0.01                  # predictions this close to the best are a tie: the smallest such budget wins


# ----------------------------------------------------------------------------- the choice


@dataclass
class Profile:
    """What one method did at one budget on the calibration questions (all steps pooled)."""

    budget: int
    accept_lengths: list[int] = field(default_factory=list)   # tokens added per step
    budget_used: list[int] = field(default_factory=list)      # tokens through the target per step (q_i)
    draft_ms: list[float] = field(default_factory=list)       # drafting ms per step (propose + observe)
    verify_ms: list[float] = field(default_factory=list)      # forward + verdict ms per step, measured in the loop
    overhead_ms: float = 0.0                                  # the loop's other per-step work, summed
    wall_s: float = 0.0                                       # measured decode time (the record only)
    tokens: int = 0                                           # measured new tokens (the record only)

    def add(self, gen: Any) -> None:
        """Pool one `decoding.decoder.Generation`."""
        self.accept_lengths += list(gen.accept_lengths)
        self.budget_used += list(gen.budget_used)
        self.draft_ms += list(gen.step_draft_ms)
        self.verify_ms += list(gen.step_verify_ms)
        self.overhead_ms += 1000 * gen.overhead_time
        self.wall_s += gen.wall_time - gen.prefill_time
        self.tokens += len(gen.output_ids)


def monotone(ms: list[float]) -> Callable[[int], float]:
    """t(q) from a measured curve, made non-decreasing: t'(q) = min over q' >= q of ms[q'-1].

    A forward of q tokens does the work of one of q' > q and less, so a q that measured slower
    than a larger one was disturbed (another process on the cores); its value is replaced by the
    larger q's. Beyond the measured range: the last value plus the last measured slope."""
    env = list(ms)
    for i in range(len(env) - 2, -1, -1):
        env[i] = min(env[i], env[i + 1])
    slope = max(env[-1] - env[-2], 0.0) if len(env) > 1 else env[-1]

    def t(q: int) -> float:
        return env[q - 1] if q <= len(env) else env[-1] + slope * (q - len(env))
    return t


def predicted_tokens_per_s(profile: Profile, t: Callable[[int], float], batch_size: int = 1,
                           scale: float = 1.0) -> float:
    """N sum(a_i) / sum(s t(q_i) + N (d_i + o)) in tokens per second (summed over a batch of N, `t`
    the curve at N, `s` the loop's forward scale, `fit_scale`); 0 for an empty profile."""
    if not profile.accept_lengths:
        return 0.0
    n = batch_size
    ms = scale * sum(t(q) for q in profile.budget_used) + n * (sum(profile.draft_ms) + profile.overhead_ms)
    return 1000 * n * sum(profile.accept_lengths) / ms if ms > 0 else 0.0


def fit_scale(profiles: list[Profile], t: Callable[[int], float]) -> float:
    """The loop's forward scale s: (the forward and verdict as measured in the loop, summed over
    the profiles' steps) / (the curve's forward alone, t(q), at the curve's context, summed over
    the same steps).

    The curve times bare forwards at one context length; in the loop a step's forward sees the
    question's own context (Spec-Bench prompts run to 1,000+ tokens), cold caches after drafting,
    and the verdict. Without s the whole-step prediction was 35-40 % optimistic (pld predicted
    36.3 tok/s, measured 26.4). A ratio of sums, not the median of per-step ratios: tokens per
    second is a ratio of sums, so slow steps count as much as they cost (the median ratio, 0.82,
    sat below the 0.86 the same instance's forwards then ran at). One scale for every candidate,
    not one each: a candidate's own ratio is its one noisy calibration pass (+-10 % here), and
    the highest of nine noisy predictions would be chosen and would overstate itself.
    1.0 when no step was timed."""
    pairs = [(v, t(q)) for p in profiles for q, v in zip(p.budget_used, p.verify_ms) if v > 0]
    den = sum(c for _, c in pairs)
    return sum(v for v, _ in pairs) / den if pairs and den > 0 else 1.0


def choose_budget(profiles: list[Profile], t: Callable[[int], float],
                  batch_size: int = 1, scale: float = 1.0) -> tuple[int, dict[int, float]]:
    """(best budget, prediction per budget). Ties go to the smaller budget (less work per step):
    a prediction within TIE of the best is a tie (measured: samd's merged drafts predicted 42.80
    tok/s at BC 8 and 42.80 at BC 16; BC 16 was chosen and ran at 41.1 on the calibration
    questions, BC 8 at 48.6).

    A drafting budget must beat BC 1 (no draft: AR's work) by MIN_GAIN to be chosen: a predicted
    gain smaller than that is within the prediction's error and timed below AR as often as
    above it (mask-probe chosen at BC 6 for a predicted +3.6 % ran at 0.97x of AR)."""
    if not profiles:
        raise ValueError("no calibration profiles to choose from")
    predicted = {p.budget: predicted_tokens_per_s(p, t, batch_size, scale) for p in profiles}
    top = max(predicted.values())
    best = min(b for b, v in predicted.items() if v >= top * (1 - TIE))
    if 1 in predicted and best != 1 and predicted[best] < predicted[1] * (1 + MIN_GAIN):
        best = 1
    return best, predicted


def summary(profile: Profile, predicted: float) -> dict:
    """One candidate's record in the manifest."""
    steps = len(profile.accept_lengths)
    return {"predicted_tokens_per_s": round(predicted, 3),
            "mat": round(sum(profile.accept_lengths) / steps, 4) if steps else None,
            "mean_q": round(statistics.fmean(profile.budget_used), 3) if steps else None,
            "draft_ms_per_step": round(sum(profile.draft_ms) / steps, 3) if steps else None,
            "steps": steps,
            "measured_tokens_per_s": round(profile.tokens / profile.wall_s, 3) if profile.wall_s > 0 else None}


def feasible_budgets(plan: Callable[[int], Any], candidates: list[int], name: str = "") -> list[int]:
    """The candidates whose plan succeeds (lookahead cannot fit its window into every budget);
    UsageError with the last plan's reason when none does."""
    ok, reason = [], ""
    for b in candidates:
        try:
            plan(b)
        except UsageError as e:
            reason = str(e)
            continue
        ok.append(b)
    if not ok:
        raise UsageError(f"{name}: none of the auto candidates {list(candidates)} fits ({reason})")
    return ok

