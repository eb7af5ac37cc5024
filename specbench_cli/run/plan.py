"""Planning a run before any model loads: every method instance (`pld`, `pld@6`, `pld@auto`)
with its options checked against its budget and sampling, the default method set, and the
questions. `check_config` is everything `specbench run` verifies before loading a model; the instances
it plans are the ones the run binds.
"""

from __future__ import annotations

from typing import Optional

from specbench_cli import methods as method_registry
from specbench_cli import tasks as task_registry
from specbench_cli.config import ADAPTIVE, AUTO, DEFAULT_BUDGET, RunConfig, method_order, parse_instance
from specbench_cli.errors import UsageError
from specbench_cli.run.auto import bcauto
from specbench_cli.tasks.base import select as select_questions


def check_config(cfg: RunConfig) -> dict:
    """The field checks (`RunConfig.validate`), then what needs the registries: the tasks
    exist and every method instance plans with its options. No model is loaded. Returns the
    planned instances (`plan_methods`), which the run then binds: a run plans once."""
    cfg.validate()
    from specbench_cli.tasks import hf

    for t in cfg.tasks:
        task_registry.get(t, cfg)  # a source's name (hf:...) is checked as far as it can be before reading
    if cfg.scorer is not None:
        from specbench_cli.scoring.quality import check_scorer

        check_scorer(cfg.scorer, "--scorer")
    given = [k for k in hf.FIELD_FLAGS if getattr(cfg, k) is not None]
    if given and not any(hf.is_hf(t) for t in cfg.tasks):
        raise UsageError(f"--{given[0].replace('_', '-')} maps the columns of an hf: task; --tasks "
                         f"{','.join(cfg.tasks)} has none")
    if cfg.questions and not any(task_registry.get(t, cfg).takes_questions_file for t in cfg.tasks):
        *some, last = task_registry.reading_questions_file()
        raise UsageError(f"--questions {cfg.questions} is not read by --tasks {','.join(cfg.tasks)} "
                         f"(use --tasks {', '.join(some)} or {last} with a file)")
    return plan_methods(cfg)


def method_context(cfg: RunConfig, target=None, tokenizer=None, budget: Optional[int] = None):
    """The settings every method is planned against (and the target once loaded); `budget`
    defaults to the run's block complexity (the default one when that is `auto`)."""
    from specbench_cli.engine.verify import SamplingConfig
    from specbench_cli.methods.core.method import MethodContext

    if budget is None:
        budget = cfg.block_complexity if isinstance(cfg.block_complexity, int) else DEFAULT_BUDGET
    return MethodContext(target=target, tokenizer=tokenizer, budget=budget, device=cfg.device,
                         dtype=cfg.dtype, sampling=SamplingConfig(cfg.temperature, cfg.top_p), seed=cfg.seed,
                         draft_model=cfg.draft_model, target_ref=cfg.model)


def plan_methods(cfg: RunConfig) -> dict:
    """Every method instance of the run (`pld`, `pld@6`, `pld@auto`), planned (options parsed
    and checked against its BC and sampling) but not bound: no model is loaded, so bad options
    fail in well under a second. An `auto` instance is planned at the default budget here and
    must accept at least one candidate budget; calibration re-plans it at the chosen one."""
    from specbench_cli.engines.naming import engine_of

    planned = {}
    for spec in method_order(cfg.methods):
        budget = bcauto.instance_budget(spec, cfg.block_complexity)
        if budget == AUTO and engine_of(spec):  # an engine's speculation is set when its server starts
            if "@" in spec:
                raise UsageError(f"method '{spec}': an engine method takes a fixed BC (NAME@N), not auto")
            budget = DEFAULT_BUDGET
        if budget == AUTO:
            method_registry.get(parse_instance(spec).name)  # an unknown name says so, not "nothing fits"
            fits = bcauto.feasible_budgets(lambda b: plan_instance(cfg, spec, b), auto_candidates(cfg), spec)
            budget = DEFAULT_BUDGET if DEFAULT_BUDGET in fits else fits[-1]
        elif budget == ADAPTIVE:
            budget = adaptive_ceiling(cfg)
        planned[spec] = plan_instance(cfg, spec, budget)
        if bcauto.instance_budget(spec, cfg.block_complexity) == ADAPTIVE and not planned[spec].adaptive_budget:
            able = [n for n in method_registry.names() if getattr(method_registry.get(n), "adaptive_budget", False)]
            raise UsageError(f"{spec}: {parse_instance(spec).name} cannot take an adaptive budget (its drafts have "
                             "input-only nodes, embeddings or state that must see every node verified); give it "
                             f"a fixed BC or auto (NAME@adaptive takes: {', '.join(able)})")
    check_target(cfg, planned)
    return planned


def check_target(cfg: RunConfig, planned: dict) -> None:
    """Every planned method gets from the run's target what it needs (its `needs`, checked
    against the capabilities the target's class declares): else one line, before any model loads."""
    from specbench_cli import targets
    from specbench_cli.engine.target import check_capabilities

    target = targets.get(cfg.target)
    for spec, method in planned.items():
        line = check_capabilities(spec, method_needs(method), cfg.target, target.capabilities)
        if line:
            raise UsageError(line)
    available = getattr(target, "check_available", None)
    if available is not None:  # a runtime the target needs (a library, a build) is there
        available()


def method_needs(method) -> tuple[str, ...]:
    """The target capabilities a planned method uses: its `needs`, `hidden_states` when it asks
    for hidden states, and what the methods it delegates to (a fallback drafter) need."""
    from specbench_cli.methods.core.method import Delegate

    needs = list(getattr(method, "needs", ()))
    if getattr(method, "needs_hidden_states", False):
        needs.append("hidden_states")
    for value in vars(method).values():
        value = getattr(value, "delegate", value)  # a fallback holds its Delegate (methods/core/fallback.py)
        if isinstance(value, Delegate):
            needs += method_needs(value.method)
    return tuple(dict.fromkeys(needs))


def plan_instance(cfg: RunConfig, spec: str, budget: int):
    """One method instance planned at `budget`; options given for its name and for the instance
    (`-o pld.max_ngram=4`, `-o pld@auto.max_ngram=4`) apply, the instance's last."""
    base = parse_instance(spec).name
    options = {**cfg.method_options.get(base, {}), **(cfg.method_options.get(spec, {}) if spec != base else {})}
    from specbench_cli.engines.naming import engine_of

    if engine_of(base):  # ENGINE:METHOD, the engine's own speculation (engines/methods.py)
        from specbench_cli.engines import methods as engine_methods

        return engine_methods.plan(cfg, spec, budget, options, method_context(cfg, budget=budget))
    return method_registry.get(base)(method_context(cfg, budget=budget), **options)


def auto_candidates(cfg: RunConfig) -> list[int]:
    return list(cfg.auto_candidates or bcauto.DEFAULT_CANDIDATES)


def adaptive_ceiling(cfg: RunConfig) -> int:
    """The largest block an adaptive instance may verify: the largest `auto` candidate."""
    return max(auto_candidates(cfg))


def default_methods() -> list[str]:
    """Every registered method that needs no training and is lossless (lossy ones, e.g.
    fastcot, change the answer on purpose and run only when asked for)."""
    return [n for n in method_registry.names()
            if not method_registry.describe(n)["needs_training"] and method_registry.describe(n)["lossless"]]


def load_questions(cfg: RunConfig):
    qs = []
    for t in cfg.tasks:
        qs += task_registry.get(t, cfg).load(cfg.questions)
    qs = select_questions(qs, cfg.categories, cfg.limit, cfg.question_ids)
    if not qs:
        raise UsageError("no questions left after --categories/--limit/--question-ids")
    return qs
