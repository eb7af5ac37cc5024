"""The model-dependent half of `--block-complexity auto` (the rule is in bcauto.py): the run's
cost curve (from the cache, measured when `auto` needs one), the calibration questions, the
calibration decoding, and what goes into the manifest."""

from __future__ import annotations

from typing import Any, Callable, Optional

from specbench_cli.console import err
from specbench_cli.errors import UsageError
from specbench_cli.run.auto import bcauto
from specbench_cli.run.auto import cost as costmod
from specbench_cli.tasks.base import select as select_questions


def auto_specs(cfg) -> list[str]:
    """The run's method instances whose budget is `auto`."""
    from specbench_cli.config import AUTO, method_order

    return [s for s in method_order(cfg.methods) if bcauto.instance_budget(s, cfg.block_complexity) == AUTO]


def run_curve(cfg, lm, threads: int, need_q: int = 0) -> tuple[Optional[costmod.CostCurve], Optional[dict]]:
    """The cached cost curve for this model/device/dtype/threads and batch size (context 400,
    `specbench cost`'s default), measured and cached first when `need_q` > 0 and the cache lacks q
    up to `need_q`. Returns (curve, manifest record), or (None, None) when none is cached and none
    is needed."""
    n = cfg.batch_size
    key = costmod.curve_key(cfg.model, lm.resolved, cfg.device, cfg.dtype, threads, bcauto.CURVE_CONTEXT,
                            lm.forward, lm.kernels, n)  # the key `specbench cost` uses (`auto` resolved)
    curve, source = costmod.load_cached(key), "cache"
    if need_q and (curve is None or curve.max_q < need_q):
        at = f"t({n}, q), {n} sequences per forward" if n > 1 else "t(q)"
        err.print(f"[dim]measuring the cost curve {at}, q = 1..{need_q} (cached for later runs)[/dim]")
        curve = costmod.measure_curve(lm.target, need_q, bcauto.CURVE_CONTEXT, bcauto.CURVE_ROUNDS, key=key,
                                      batch_size=n)
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
    for t in cfg.tasks:
        suite += task_registry.get(t, cfg).load(cfg.questions)
    suite = select_questions(suite, cfg.categories, None, None)
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


def calibrate_one(spec: str, cfg, lm, decoder, prompts: list[list[int]], curve: costmod.CostCurve,
                  max_new: int, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Decode the calibration prompts with instance `spec` at every feasible candidate budget;
    return its manifest record (`chosen` and one summary per candidate)."""
    from specbench_cli.run.plan import auto_candidates, plan_instance

    fits = bcauto.feasible_budgets(lambda b: plan_instance(cfg, spec, b), auto_candidates(cfg), spec)
    profiles = []
    for i, b in enumerate(fits):
        method = plan_instance(cfg, spec, b).bind(lm.target, lm.tokenizer)
        if i == 0:  # untimed warm-up, as the runner does before anything it reports
            decoder.generate(method, prompts[0], min(16, max_new), b, _generator(cfg))
        method.forget()  # a pass over the calibration prompts, as the runner's over the questions
        profile = bcauto.Profile(budget=b)
        for ids in prompts:
            gen = decoder.generate(method, ids, max_new, b, _generator(cfg))
            profile.add(gen)
            method.remember(gen.output_ids)
        profiles.append(profile)
        progress(f"{spec} BC {b}")
    chosen, predicted = bcauto.choose_budget(profiles, bcauto.monotone(curve.ms), cfg.batch_size)
    return {"chosen": chosen, "batch_size": cfg.batch_size,
            "candidates": {str(p.budget): bcauto.summary(p, predicted[p.budget]) for p in profiles}}


def _generator(cfg):
    """A seeded generator when sampling (calibration is then reproducible), else None."""
    import torch

    return torch.Generator().manual_seed(cfg.seed) if cfg.temperature > 0 else None


def prepare(cfg, lm, planned: dict, questions: list, threads: int,
            manifest: Optional[dict] = None) -> tuple[dict, dict]:
    """Before the runner: (planned methods with auto instances re-planned at their chosen budget,
    what the manifest records: `cost_curve` and `bc_auto`). On resume the manifest's choices
    are reused, never recalibrated."""
    from specbench_cli.run.plan import auto_candidates, plan_instance

    specs = auto_specs(cfg)
    if manifest is not None:
        choices = manifest.get("bc_auto") or {}
        missing = [s for s in specs if s not in choices]
        if missing:
            raise UsageError(f"cannot resume: the manifest has no auto budget for {', '.join(missing)}")
        extra: dict[str, Any] = {}
    else:
        curve, record = run_curve(cfg, lm, threads, max(auto_candidates(cfg)) if specs else 0)
        extra = {"cost_curve": record}
        choices = {}
        if specs:
            choices = calibrate(cfg, lm, specs, questions, curve)
            extra["bc_auto"] = choices
    planned = dict(planned)
    for spec in specs:
        planned[spec] = plan_instance(cfg, spec, int(choices[spec]["chosen"]))
    return planned, extra


def calibrate(cfg, lm, specs: list[str], questions: list, curve: costmod.CostCurve) -> dict:
    """Every auto instance calibrated on the same calibration prompts."""
    from specbench_cli.engine.loop import Decoder
    from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn
    from specbench_cli.run.plan import method_context

    cal = calibration_questions(cfg, questions, cfg.auto_questions)
    prompter = ChatPrompter(lm.tokenizer, cfg.prompt_template)
    prompts = [prompter(user_turn(q.turns[0])) for q in cal]
    decoder = Decoder(lm.target, stop_token_ids(lm.tokenizer, lm.target), method_context(cfg).sampling)
    max_new = min(cfg.auto_tokens, cfg.max_new_tokens)
    ids = [f"{q.task}/{q.id}" for q in cal]
    err.print(f"[dim]--block-complexity auto: calibrating {len(specs)} method(s) on {', '.join(ids)} "
              f"({max_new} new tokens each)[/dim]")
    choices = {}
    for spec in specs:
        record = calibrate_one(spec, cfg, lm, decoder, prompts, curve, max_new)
        record["questions"] = ids
        record["max_new_tokens"] = max_new
        choices[spec] = record
        err.print(f"[dim]  {spec}: BC {record['chosen']} (predicted "
                  f"{record['candidates'][str(record['chosen'])]['predicted_tokens_per_s']:.1f} tok/s)[/dim]")
    return choices
