"""A method instance, as `--methods` lists it, parsed once.

An instance is `NAME` (at the run's `--block-complexity`), `NAME@N` (budget N), `NAME@auto` or
`NAME@adaptive`; NAME is a method specbench decodes (`pld`) or an engine's own speculation,
`ENGINE:METHOD` (`llama.cpp:ngram-mod@5`, names.py). Planning (run/plan.py) turns the
run's list into `MethodInstance`s; limits, calibration, the runner and the manifest read the
typed value, never the text again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from specbench_cli.config.syntax import ADAPTIVE, AR, AUTO, DEFAULT_BUDGET, Budget, parse_bc
from specbench_cli.errors import UsageError
from specbench_cli.names import engine_ar, engine_of


@dataclass(frozen=True)
class MethodInstance:
    """One method instance of a run."""

    label: str                       # as listed ('pld@6'): the rows' `method`, the manifest's keys
    name: str                        # the method it instantiates ('pld', 'llama.cpp:ngram-mod')
    engine: Optional[str] = None     # the engine of ENGINE:METHOD ('llama.cpp'); None: specbench decodes it
    budget: Optional[Budget] = None  # its own: N, 'auto' or 'adaptive'; None: the run's --block-complexity

    def budget_in(self, run_bc: Budget) -> Budget:
        """The budget it runs at: its own, else the run's. AR always processes one token per
        forward: under `--block-complexity auto` (or adaptive) its rows record 1."""
        if self.name == AR:
            return run_bc if isinstance(run_bc, int) else 1
        return self.budget if self.budget is not None else run_bc

    def row_label(self, method_label: str, run_bc: Budget = DEFAULT_BUDGET) -> str:
        """The method's label plus the instance suffix ('pld(max_ngram=4)@auto'); under
        `--block-complexity auto` a plain name is labelled `@auto` too (tables then show its BC),
        and `@adaptive` under `--block-complexity adaptive`."""
        own = self.budget
        if own is None and self.name != AR and run_bc in (AUTO, ADAPTIVE):
            own = run_bc
        return method_label if own is None else f"{method_label}@{own}"


def parse_instance(text: str) -> MethodInstance:
    """'pld' -> pld at the run's budget; 'pld@6', 'pld@auto', 'pld@adaptive' -> its own budget;
    'llama.cpp:ngram-mod@5' -> an engine method. UsageError (one line naming the instance) for
    an empty name, `ar@...` or a budget that is not a whole number in bounds, 'auto' or 'adaptive'."""
    if "@" not in text:
        return MethodInstance(text, text, engine_of(text))
    name, raw = text.split("@", 1)
    if not name:
        raise UsageError(f"method '{text}': expected NAME@BC (a number, 'auto' or 'adaptive')")
    if name == AR:
        raise UsageError(f"method '{text}': ar ignores the block complexity; list it as 'ar'")
    return MethodInstance(text, name, engine_of(name), parse_bc(raw, flag=f"method '{text}': the BC after '@'"))


def run_order(listed: Iterable[MethodInstance]) -> list[MethodInstance]:
    """AR first (the baseline), then `listed` in order without duplicates; an engine's own AR
    (`llama.cpp:ar`) before the first of its engine's methods (names.py)."""
    out = {AR: MethodInstance(AR, AR)}
    for inst in listed:
        if inst.engine is not None:
            baseline = engine_ar(inst.engine)
            out.setdefault(baseline, MethodInstance(baseline, baseline, inst.engine))
        out.setdefault(inst.label, inst)
    return list(out.values())


def method_order(names: list[str]) -> list[str]:
    """The labels of `run_order` for the listed names (each must parse)."""
    return [inst.label for inst in run_order([parse_instance(n) for n in names])]
