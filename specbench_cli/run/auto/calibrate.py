"""The model-dependent half of `--block-complexity auto` (the rule is in bcauto.py): the run's
cost curve (from the cache, measured when `auto` needs one), the calibration questions, the
calibration decoding, and what goes into the manifest."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional

from specbench_cli.config.instance import MethodInstance
from specbench_cli.config.syntax import ADAPTIVE, AUTO
from specbench_cli.console import err
from specbench_cli.errors import UsageError
from specbench_cli.run.auto import bcauto
from specbench_cli.run.auto import cost as costmod
from specbench_cli.store.conditions import BUSY_MARGIN, load_average
from specbench_cli.tasks.base import select as select_questions


def auto_instances(cfg, instances: Iterable[MethodInstance]) -> list[MethodInstance]:
    """The method instances (of the run's, in run order) whose budget is `auto`."""
    return [i for i in instances if i.budget_in(cfg.budget.block_complexity) == AUTO]


def adaptive_instances(cfg, instances: Iterable[MethodInstance]) -> list[MethodInstance]:
    """The method instances (of the run's, in run order) whose budget is `adaptive`."""
    return [i for i in instances if i.budget_in(cfg.budget.block_complexity) == ADAPTIVE]


def run_curve(cfg, lm, threads: int, need_q: int = 0,
              if_missing: bool = False) -> tuple[Optional[costmod.CostCurve], Optional[dict]]:
    """The cached cost curve for this model/device/dtype/threads and batch size (context 400,
    `specbench cost`'s default), measured and cached first when `need_q` > 0 and the cache lacks q
    up to `need_q`. Returns (curve, manifest record), or (None, None) when none is cached and none
    is needed."""
    n = cfg.decoding.batch_size
    key = costmod.curve_key(cfg.model.name, lm.resolved, cfg.model.device, cfg.model.dtype, threads,
                            bcauto.CURVE_CONTEXT, lm.forward, lm.kernels, n)  # the key `specbench cost` uses (`auto` resolved)
    curve, source = costmod.load_cached(key), "cache"
    if need_q and (curve is None or (curve.max_q < need_q and not if_missing)):
        at = f"t({n}, q), {n} sequences per forward" if n > 1 else "t(q)"
        err.print(f"[dim]measuring the cost curve {at}, q = 1..{need_q} (cached for later runs)[/dim]")
        curve = costmod.measure_curve(lm.target, need_q, bcauto.CURVE_CONTEXT, bcauto.CURVE_ROUNDS, key=key,
                                      batch_size=n)
        load = load_average()
        if load is not None and load[0] > threads + BUSY_MARGIN:
            # a curve timed while other work shared the cores would decide later runs on quiet ones
            # (one measured at load 5 gave t(1) = 748 ms where a quiet forward takes 34 ms)
            err.print(f"[yellow]the cost curve was measured on a busy machine (1-minute load {load[0]} with "
                      f"{threads} threads): used for this run only, not cached[/yellow]")
            source = "measured (busy, not cached)"
        else:
            costmod.save_cached(curve)
            source = "measured"
    if curve is None:
        return None, None
    return curve, {"source": source, "cache_file": costmod.cache_path(key).name, **curve.to_dict()}


def calibration_questions(cfg, run_questions: list, n: int) -> list:
    """`n` calibration questions, none of them among the run's: first the run's own suite (its
    tasks and --categories, without --limit) minus the reported questions, then the built-in
    `mini` suite, each taken round-robin over its categories (so two questions are two kinds of
    text). The run's own kind of text comes first because acceptance depends on it: pld accepts
    far more on Spec-Bench's summarisation/RAG prompts than on `mini`'s short ones."""
    from specbench_cli import tasks as task_registry

    taken = {(q.task, q.id) for q in run_questions}
    suite = []
    for t in cfg.task.tasks:
        suite += task_registry.get(t, cfg.task).load(cfg.task.questions)
    suite = select_questions(suite, cfg.task.categories, None, None)
    mini = task_registry.get(bcauto.CALIBRATION_TASK).load(None)
    ordered = []
    for pool in (suite, mini):
        ordered += _round_robin([q for q in pool if (q.task, q.id) not in taken])
        taken |= {(q.task, q.id) for q in ordered}
        if len(ordered) >= n:
            break
    if not ordered:
        raise UsageError("--block-complexity auto calibrates on questions the run does not report, but it "
                         "reports all of its suite's and all of mini's; leave some out (--limit, "
                         "--categories) or use fixed budgets")
    return ordered[:n]


def _round_robin(pool: list) -> list:
    """`pool` reordered as first of each category, then second of each, ..."""
    by_cat: dict[str, list] = {}
    for q in pool:
        by_cat.setdefault(q.category, []).append(q)
    return [v[i] for i in range(max((len(v) for v in by_cat.values()), default=0))
            for v in by_cat.values() if i < len(v)]


def calibrate_one(inst: MethodInstance, cfg, lm, decoder, prompts: list[list[int]], curve: costmod.CostCurve,
                  max_new: int, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Decode the calibration prompts with instance `inst` at every feasible candidate budget;
    return its manifest record (`chosen` and one summary per candidate)."""
    from specbench_cli.run.plan import auto_candidates, plan_instance

    fits = bcauto.feasible_budgets(lambda b: plan_instance(cfg, inst, b), auto_candidates(cfg), inst.label)
    profiles = []
    for i, b in enumerate(fits):
        method = plan_instance(cfg, inst, b).bind(lm.target, lm.tokenizer)
        if i == 0:  # untimed warm-up, as the runner does before anything it reports
            decoder.generate(method, prompts[0], min(16, max_new), b, _generator(cfg))
        profiles.append(_decode_pass(method, decoder, prompts, b, max_new, cfg))
        progress(f"{inst.label} BC {b}")
    t = bcauto.monotone(curve.ms)
    scale = bcauto.fit_scale(profiles, t)
    chosen, predicted = bcauto.choose_budget(profiles, t, cfg.decoding.batch_size, scale)
    return {"chosen": chosen, "batch_size": cfg.decoding.batch_size, "forward_scale": round(scale, 4),
            "candidates": {str(p.budget): bcauto.summary(p, predicted[p.budget]) for p in profiles}}


def _decode_pass(method, decoder, prompts: list[list[int]], budget: int, max_new: int, cfg,
                 adaptive=None) -> bcauto.Profile:
    """One pass over the calibration prompts, as the runner's over the questions (`adaptive`: an
    adaptive budget within `budget`, decoding/budget.py)."""
    method.forget()
    profile = bcauto.Profile(budget=budget)
    for ids in prompts:
        gen = decoder.generate(method, ids, max_new, budget, _generator(cfg), adaptive)
        profile.add(gen)
        method.remember(gen.output_ids)
    return profile


def calibrate_adaptive(inst: MethodInstance, cfg, lm, decoder, prompts: list[list[int]], curve: costmod.CostCurve,
                       max_new: int) -> dict:
    """An adaptive instance (decoding/budget.py): decode the calibration prompts at the ceiling with
    every draft verified whole, counting each node's acceptance by the drafter's signal; fit the
    whole step's cost T(q) = s t(q) + o from the same steps (s: `bcauto.fit_scale`; o: the loop's
    other work per step); decode them again with the per-step ratio rule for the decode's rate
    lambda (`rate_per_ms`), and a third time with the frozen policy (lambda's rule) for its prediction.
    Returns the manifest record `policy` rebuilds the policy from."""
    from specbench_cli.decoding.budget import ONLINE, AcceptanceTable, AdaptiveBudget
    from specbench_cli.run.plan import adaptive_ceiling, plan_instance

    ceiling = adaptive_ceiling(cfg)
    method = plan_instance(cfg, inst, ceiling).bind(lm.target, lm.tokenizer)
    t = bcauto.monotone(curve.ms)
    learning = AdaptiveBudget(AcceptanceTable(), [t(q) for q in range(1, ceiling + 1)], learning=True, history=True)
    decoder.generate(method, prompts[0], min(16, max_new), ceiling, _generator(cfg), learning)  # untimed warm-up
    learning.table = AcceptanceTable()
    whole = _decode_pass(method, decoder, prompts, ceiling, max_new, cfg, learning)
    steps = max(len(whole.accept_lengths), 1)
    scale = bcauto.fit_scale([whole], t)
    other = whole.overhead_ms / steps
    draft_ms = sum(whole.draft_ms) / steps
    n = cfg.decoding.batch_size
    record = {"ceiling": ceiling, "batch_size": n, "forward_scale": round(scale, 4),
              "other_ms_per_step": round(other, 4), "draft_ms_per_step": round(draft_ms, 4),
              "step_ms": [round(scale * t(q) + other, 4) for q in range(1, ceiling + 1)],
              "table": learning.table.to_dict(), "online": ONLINE, "history": True, "hindsight": True,
              "whole": bcauto.summary(whole, bcauto.predicted_tokens_per_s(whole, t, n, scale))}
    # the decode's own rate, lambda (tokens per ms of one sequence, in the policy's cost model),
    # from a pass with the per-step ratio rule; the run keeps what beats lambda (budget.plan)
    ratio_rule = policy(record)
    ratio = _decode_pass(method, decoder, prompts, ceiling, max_new, cfg, ratio_rule)
    ms = sum(ratio_rule.draft_ms + ratio_rule.cost(q) for q in ratio.budget_used)
    record["rate_per_ms"] = round(sum(ratio.accept_lengths) / ms, 6) if ms > 0 else 0.0
    record["ratio_rule"] = bcauto.summary(ratio, bcauto.predicted_tokens_per_s(ratio, t, n, scale))
    trimmed = _decode_pass(method, decoder, prompts, ceiling, max_new, cfg, policy(record))
    record["adaptive"] = bcauto.summary(trimmed, bcauto.predicted_tokens_per_s(trimmed, t, n, scale))
    return record


def policy(record: dict):
    """The frozen adaptive budget of a manifest record (`calibrate_adaptive`)."""
    from specbench_cli.decoding.budget import AcceptanceTable, AdaptiveBudget

    try:
        history = record.get("history", False)  # absent: a record from before the split, used as it ran
        if not isinstance(history, bool):
            raise ValueError("'history' must be true or false")
        return AdaptiveBudget(AcceptanceTable.from_dict(record["table"]), record["step_ms"],
                              record["draft_ms_per_step"], online=record.get("online", 0.0), history=history,
                              rate_per_ms=record.get("rate_per_ms", 0.0),
                              hindsight=record.get("hindsight", False))  # absent: counted as it ran
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"the manifest's adaptive budget record is unusable ({e})") from None


def _generator(cfg):
    """A seeded generator when sampling (calibration is then reproducible), else None."""
    import torch

    return torch.Generator().manual_seed(cfg.decoding.seed) if cfg.decoding.temperature > 0 else None


def prepare(cfg, lm, planned: dict, questions: list, threads: int,
            manifest: Optional[dict] = None) -> tuple[dict, dict]:
    """Before the runner: (planned methods with auto instances re-planned at their chosen budget,
    what the manifest records: `cost_curve` and `bc_auto`). On resume the manifest's choices
    are reused, never recalibrated."""
    from specbench_cli.run.plan import auto_candidates, plan_instance

    auto, adaptive = auto_instances(cfg, planned), adaptive_instances(cfg, planned)
    if manifest is not None:
        choices = manifest.get("bc_auto") or {}
        policies = manifest.get("bc_adaptive") or {}
        missing = ([i.label for i in auto if i.label not in choices]
                   + [i.label for i in adaptive if i.label not in policies])
        if missing:
            raise UsageError(f"cannot resume: the manifest has no auto or adaptive budget for {', '.join(missing)}")
        extra: dict[str, Any] = {}
    else:
        # auto/adaptive need the curve up to their largest candidate; a fixed-budget run measures one up
        # to its largest budget only when none is cached (a few seconds: 5 rounds of q = 1..BC; a shorter
        # cached curve is extrapolated), so every report can print the speedup the cost model predicts
        if auto or adaptive:
            curve, record = run_curve(cfg, lm, threads, max(auto_candidates(cfg)))
        else:
            largest = max([m.ctx.budget for m in planned.values() if hasattr(m, "ctx")] + [1])
            curve, record = run_curve(cfg, lm, threads, largest, if_missing=True)
        extra = {"cost_curve": record}
        choices, policies = {}, {}
        if auto or adaptive:
            choices, policies = calibrate(cfg, lm, auto, adaptive, questions, curve)
        if auto:
            extra["bc_auto"] = choices
        if adaptive:
            extra["bc_adaptive"] = policies
    planned = dict(planned)
    for inst in auto:
        planned[inst] = plan_instance(cfg, inst, int(choices[inst.label]["chosen"]))
    for inst in adaptive:  # the frozen policy rides in the method's context to the loop (MethodContext.adaptive)
        planned[inst].ctx = dataclasses.replace(planned[inst].ctx, adaptive=policy(policies[inst.label]))
    return planned, extra


def calibrate(cfg, lm, auto: list[MethodInstance], adaptive: list[MethodInstance], questions: list,
              curve: costmod.CostCurve) -> tuple[dict, dict]:
    """Every auto and adaptive instance calibrated on the same calibration prompts: (auto
    choices, adaptive records)."""
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn
    from specbench_cli.run.plan import method_context

    cal = calibration_questions(cfg, questions, cfg.budget.auto_questions)
    prompter = ChatPrompter(lm.tokenizer, cfg.model.prompt_template)
    prompts = [prompter(user_turn(q.turns[0])) for q in cal]
    decoder = Decoder(lm.target, stop_token_ids(lm.tokenizer, lm.target), method_context(cfg).sampling)
    max_new = min(cfg.budget.auto_tokens, cfg.decoding.max_new_tokens)
    ids = [f"{q.task}/{q.id}" for q in cal]
    err.print(f"[dim]--block-complexity auto/adaptive: calibrating {len(auto) + len(adaptive)} method(s) on "
              f"{', '.join(ids)} ({max_new} new tokens each)[/dim]")
    shared = {"questions": ids, "max_new_tokens": max_new}
    choices = {}
    for inst in auto:
        record = choices[inst.label] = {**calibrate_one(inst, cfg, lm, decoder, prompts, curve, max_new), **shared}
        err.print(f"[dim]  {inst.label}: BC {record['chosen']} (predicted "
                  f"{record['candidates'][str(record['chosen'])]['predicted_tokens_per_s']:.1f} tok/s)[/dim]")
    policies = {}
    for inst in adaptive:
        record = policies[inst.label] = {**calibrate_adaptive(inst, cfg, lm, decoder, prompts, curve, max_new),
                                         **shared}
        a, w = record["adaptive"], record["whole"]
        err.print(f"[dim]  {inst.label}: adaptive, mean block {a['mean_q']} of at most {record['ceiling']} (predicted "
                  f"{a['predicted_tokens_per_s']:.1f} tok/s; whole drafts {w['predicted_tokens_per_s']:.1f})[/dim]")
    return choices, policies
