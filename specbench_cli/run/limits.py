"""Lengths against the model's context: checked from the model's header before it loads, the
first turns' prompts once the tokenizer is there (before any decoding), and every turn's cap as
it runs.

A turn may produce at most `context - prompt - B` new tokens, where B is the largest block
complexity of the run's methods (the last forward of a turn writes up to B positions past the
sequence). Every method of a question gets the same cap, so their answers stay comparable with
AR's; a row whose cap was lowered this way records it in `max_new_tokens`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from specbench_cli.config import AUTO, RunConfig
from specbench_cli.errors import UsageError


def largest_budget(cfg: RunConfig, planned: dict, candidates: Iterable[int]) -> int:
    """The largest BC any instance may use: a fixed one's, or the largest `auto` candidate."""
    from specbench_cli.run.auto import bcauto

    fixed = [m.ctx.budget for spec, m in planned.items()
             if bcauto.instance_budget(spec, cfg.block_complexity) != AUTO]
    auto = list(candidates) if any(bcauto.instance_budget(s, cfg.block_complexity) == AUTO for s in planned) else []
    return max(fixed + auto + [1])


def check_declared(cfg: RunConfig, context: Optional[int], budget: int) -> None:
    """BC and --max-new-tokens against a context length known before the model loads."""
    if context is None:
        return
    if budget >= context:
        raise UsageError(f"block complexity {budget} does not fit {cfg.model}'s context of {context} tokens")
    if cfg.max_new_tokens + budget >= context:
        raise UsageError(f"--max-new-tokens {cfg.max_new_tokens} + block complexity {budget} exceed {cfg.model}'s "
                         f"context of {context} tokens; use at most --max-new-tokens {context - budget - 1} "
                         f"(a turn also stops where prompt + answer + block complexity reach the context)")


@dataclass
class Room:
    """How many new tokens a turn may make in a context of `context` tokens (None: unknown)."""

    context: Optional[int]
    budgets: list[int]

    @property
    def budget(self) -> int:
        return max(self.budgets, default=1)

    def new_tokens(self, prompt_tokens: int, wanted: int) -> int:
        if self.context is None:
            return wanted
        room = self.context - prompt_tokens - self.budget
        if room < 1:
            raise ContextFull(f"a prompt of {prompt_tokens} tokens leaves no room for block complexity "
                              f"{self.budget} in the model's context of {self.context} tokens")
        return min(wanted, room)


class ContextFull(ValueError):
    """A turn's prompt fills the context (recorded as the row's error)."""


def check_prompts(questions, prompter, room: Room) -> None:
    """Every question's first turn must leave room for at least one new token (exit 2 naming
    the first that does not); later turns depend on earlier answers and are capped as they run."""
    from specbench_cli.models.prompting import user_turn

    if room.context is None:
        return
    for q in questions:
        n = len(prompter(user_turn(q.turns[0])))
        if n + room.budget + 1 > room.context:
            raise UsageError(f"question {q.task}/{q.id}: its prompt is {n} tokens, which with block complexity "
                             f"{room.budget} leaves no room in the model's context of {room.context} tokens; "
                             f"drop it (--question-ids) or use a model with a longer context")
