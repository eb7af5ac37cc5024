"""Planning a run before any model loads: every method instance (`pld`, `pld@6`, `pld@auto`)
parsed once into a `MethodInstance` (config/instance.py) and planned with its options checked
against its budget and sampling, the default method set, and the questions. `check_config` is
everything `specbench run` verifies before loading a model; the instances it plans are the ones
the run binds, keyed by their `MethodInstance`.
"""

from __future__ import annotations

from typing import Optional

from specbench_cli import methods as method_registry
from specbench_cli import tasks as task_registry
from specbench_cli.config.fields import RunConfig, at_temperature, temperatures
from specbench_cli.config.instance import MethodInstance, parse_instance, run_order
from specbench_cli.config.syntax import ADAPTIVE, AUTO, DEFAULT_BUDGET
from specbench_cli.errors import UsageError
from specbench_cli.names import engine_ar
from specbench_cli.run.auto import bcauto
from specbench_cli.tasks.base import select as select_questions


def check_config(cfg: RunConfig) -> dict:
    """The field checks (`RunConfig.validate`) and the method instances (`method_instances`),
    then what needs the registries: the tasks exist and every method instance plans with its
    options, at every temperature of the run (a method that cannot sample is refused at the
    temperature it cannot take). No model is loaded. Returns the instances planned at the first
    temperature (`plan_methods`), which the run then binds: a run plans once."""
    cfg.validate()
    instances = method_instances(cfg)
    from specbench_cli.tasks import hf

    for t in cfg.task.tasks:
        task_registry.get(t, cfg.task)  # a source's name (hf:...) is checked as far as it can be before reading
    if cfg.task.scorer is not None:
        from specbench_cli.scoring.quality import check_scorer

        check_scorer(cfg.task.scorer, "--scorer")
    given = [k for k in hf.FIELD_FLAGS if getattr(cfg.task, k) is not None]
    if given and not any(hf.is_hf(t) for t in cfg.task.tasks):
        raise UsageError(f"--{given[0].replace('_', '-')} maps the columns of an hf: task; --tasks "
                         f"{','.join(cfg.task.tasks)} has none")
    if cfg.task.questions and not any(task_registry.get(t, cfg.task).takes_questions_file for t in cfg.task.tasks):
        *some, last = task_registry.reading_questions_file()
        raise UsageError(f"--questions {cfg.task.questions} is not read by --tasks {','.join(cfg.task.tasks)} "
                         f"(use --tasks {', '.join(some)} or {last} with a file)")
    plans = [plan_methods(at_temperature(cfg, t), instances) for t in temperatures(cfg)]
    return plans[0]


def method_instances(cfg: RunConfig) -> list[MethodInstance]:
    """The run's method instances in run order (AR first, `config.instance.run_order`), each
    parsed once from `--methods`. UsageError for one that does not parse, for an `auto` or
    `adaptive` budget in a temperature sweep, and for options given for a method the run does
    not have. Needs no registry and no model."""
    listed = [parse_instance(m) for m in cfg.methods.names]
    if isinstance(cfg.decoding.temperature, list):  # auto budgets are calibrated at one temperature
        if any(bc in (AUTO, ADAPTIVE) for bc in [cfg.budget.block_complexity] + [i.budget for i in listed]):
            raise UsageError("--temperature with several values takes fixed budgets: 'auto' and 'adaptive' "
                             "are calibrated at one temperature (run each temperature on its own)")
    named = {n for i in listed for n in (i.label, i.name)}
    named |= {engine_ar(i.engine) for i in listed if i.engine is not None}  # ENGINE:ar joins its engine's methods
    for m in cfg.methods.options:
        if m not in named:
            raise UsageError(f"options given for method '{m}', which is not in --methods")
    return run_order(listed)


def method_context(cfg: RunConfig, target=None, tokenizer=None, budget: Optional[int] = None):
    """The settings every method is planned against (and the target once loaded); `budget`
    defaults to the run's block complexity (the default one when that is `auto`)."""
    from specbench_cli.decoding.verify import SamplingConfig
    from specbench_cli.methods.core.method import MethodContext

    if budget is None:
        budget = cfg.budget.block_complexity if isinstance(cfg.budget.block_complexity, int) else DEFAULT_BUDGET
    return MethodContext(target=target, tokenizer=tokenizer, budget=budget, device=cfg.model.device,
                         dtype=cfg.model.dtype, sampling=SamplingConfig(cfg.decoding.temperature, cfg.decoding.top_p),
                         seed=cfg.decoding.seed,
                         draft_model=cfg.model.draft, target_ref=cfg.model.name)


def plan_methods(cfg: RunConfig, instances: Optional[list[MethodInstance]] = None) -> dict:
    """Every method instance of the run (`method_instances`, parsed from `cfg` when not given),
    planned (options parsed and checked against its BC and sampling) but not bound: no model is
    loaded, so bad options fail in well under a second. An `auto` instance is planned at the
    default budget here and must accept at least one candidate budget; calibration re-plans it
    at the chosen one. Returns MethodInstance -> planned method, in run order."""
    if instances is None:
        instances = method_instances(cfg)
    planned = {}
    engines_known = False
    for inst in instances:
        if inst.engine is not None and not engines_known:  # an unknown name says so before any engine check
            from specbench_cli.servers import registry as engine_methods

            for other in instances:
                if other.engine is not None and other.label in cfg.methods.names:
                    engine_methods.get(other.name)
            engines_known = True
        budget = inst.budget_in(cfg.budget.block_complexity)
        if budget == AUTO and inst.engine is not None:  # an engine's speculation is set when its server starts
            if inst.budget is not None:
                raise UsageError(f"method '{inst.label}': an engine method takes a fixed BC (NAME@N), not auto")
            budget = DEFAULT_BUDGET
        if budget == AUTO:
            method_registry.get(inst.name)  # an unknown name says so, not "nothing fits"
            fits = bcauto.feasible_budgets(lambda b: plan_instance(cfg, inst, b), auto_candidates(cfg), inst.label)
            budget = DEFAULT_BUDGET if DEFAULT_BUDGET in fits else fits[-1]
        elif budget == ADAPTIVE:
            budget = adaptive_ceiling(cfg)
        planned[inst] = plan_instance(cfg, inst, budget)
        if inst.budget_in(cfg.budget.block_complexity) == ADAPTIVE and not planned[inst].adaptive_budget:
            able = [n for n in method_registry.names() if getattr(method_registry.get(n), "adaptive_budget", False)]
            raise UsageError(f"{inst.label}: {inst.name} cannot take an adaptive budget (its drafts have "
                             "input-only nodes, embeddings or state that must see every node verified); give it "
                             f"a fixed BC or auto (NAME@adaptive takes: {', '.join(able)})")
    check_target(cfg, planned)
    return planned


def check_target(cfg: RunConfig, planned: dict) -> None:
    """Every planned method gets from the run's target what it needs (its `needs`, checked
    against the capabilities the target's class declares): else one line, before any model loads."""
    from specbench_cli import targets
    from specbench_cli.decoding.target import check_capabilities

    target = targets.get(cfg.model.target)
    for inst, method in planned.items():
        line = check_capabilities(inst.label, method_needs(method), cfg.model.target, target.capabilities)
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


def plan_instance(cfg: RunConfig, inst: MethodInstance, budget: int):
    """One method instance planned at `budget`; options given for its name and for the instance
    (`-o pld.max_ngram=4`, `-o pld@auto.max_ngram=4`) apply, the instance's last."""
    options = {**cfg.methods.options.get(inst.name, {}),
               **(cfg.methods.options.get(inst.label, {}) if inst.label != inst.name else {})}
    if inst.engine is not None:  # ENGINE:METHOD, the engine's own speculation (servers/registry.py)
        from specbench_cli.servers import registry as engine_methods

        return engine_methods.plan(cfg, inst, budget, options, method_context(cfg, budget=budget))
    return method_registry.get(inst.name)(method_context(cfg, budget=budget), **options)


def auto_candidates(cfg: RunConfig) -> list[int]:
    return list(cfg.budget.auto_candidates or bcauto.DEFAULT_CANDIDATES)


def adaptive_ceiling(cfg: RunConfig) -> int:
    """The largest block an adaptive instance may verify: the largest `auto` candidate."""
    return max(auto_candidates(cfg))


def default_methods() -> list[str]:
    """Every registered method that needs no training and is lossless (lossy ones, e.g.
    fastcot, change the answer on purpose and run only when asked for), except those that draft
    from a reference answer (synthetic: it measures the loop, not a drafter)."""
    return [n for n in method_registry.names()
            if not method_registry.describe(n)["needs_training"] and method_registry.describe(n)["lossless"]
            and not getattr(method_registry.get(n), "reference_drafts", False)]


def load_questions(cfg: RunConfig):
    qs = []
    for t in cfg.task.tasks:
        qs += task_registry.get(t, cfg.task).load(cfg.task.questions)
    qs = select_questions(qs, cfg.task.categories, cfg.task.limit, cfg.task.question_ids)
    if not qs:
        raise UsageError("no questions left after --categories/--limit/--question-ids")
    return qs
