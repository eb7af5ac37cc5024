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

from specbench_cli.config.fields import RunConfig
from specbench_cli.config.syntax import AUTO
from specbench_cli.errors import UsageError


def largest_budget(cfg: RunConfig, planned: dict, candidates: Iterable[int]) -> int:
    """The largest BC any instance may use: a fixed one's, or the largest `auto` candidate
    (`planned`: MethodInstance -> planned method)."""
    fixed = [m.ctx.budget for inst, m in planned.items() if inst.budget_in(cfg.budget.block_complexity) != AUTO]
    auto = list(candidates) if any(inst.budget_in(cfg.budget.block_complexity) == AUTO for inst in planned) else []
    return max(fixed + auto + [1])


def check_declared(cfg: RunConfig, context: Optional[int], budget: int) -> None:
    """BC and --max-new-tokens against a context length known before the model loads."""
    if context is None:
        return
    if budget >= context:
        raise UsageError(f"block complexity {budget} does not fit {cfg.model.name}'s context of {context} tokens")
    if cfg.decoding.max_new_tokens + budget >= context:
        raise UsageError(f"--max-new-tokens {cfg.decoding.max_new_tokens} + block complexity {budget} exceed "
                         f"{cfg.model.name}'s "
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


# ----------------------------------------------------------------------------- batch memory
# At --batch-size N every batch holds N rows of KV cache, each as long as the batch's longest
# prompt + the cap + the block complexity (targets/hf/kv.py: BatchKVCache). Before the model
# loads, prompt lengths are estimated from their text; once the tokenizer is there the first
# turns' are exact (later turns hold earlier answers: prompt + answers at the cap).
BYTES_PER_TOKEN_ESTIMATE = 2   # UTF-8 bytes per token; tokenizers of the supported models average 3-4 on English
TEMPLATE_TOKENS = 64           # a chat template's own tokens per turn (roles, system prompt), generously


def available_memory() -> Optional[int]:
    """Bytes of memory this machine can still give (Linux MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def kv_bytes_per_token(shape: tuple[int, int, int], dtype: str) -> int:
    """Keys and values of one token in every layer: 2 x layers x kv heads x head dim x element size."""
    layers, kv_heads, head_dim = shape
    return 2 * layers * kv_heads * head_dim * (4 if dtype == "float32" else 2)


def question_tokens(q, max_new_tokens: int, first_turn: Optional[int] = None) -> int:
    """A question's longest prompt (its last turn's): every turn's text + template, and the
    answers before it at the cap. `first_turn`: the first turn's exact length when known."""
    turns = [TEMPLATE_TOKENS + -(-len(t.encode("utf-8")) // BYTES_PER_TOKEN_ESTIMATE) for t in q.turns]
    if first_turn is not None:
        turns[0] = first_turn
    return sum(turns) + (len(q.turns) - 1) * max_new_tokens


def batch_cache_bytes(lengths: list[int], batch_size: int, max_new_tokens: int, budget: int, per_token: int,
                      context: Optional[int]) -> tuple[int, int]:
    """(bytes, tokens per row) of the largest batch's KV cache: groups of `batch_size` consecutive
    questions, `lengths` their longest prompts; a row never exceeds the context (turns are capped)."""
    worst_bytes, worst_row = 0, 0
    for i in range(0, len(lengths), batch_size):
        group = lengths[i:i + batch_size]
        row = max(group) + max_new_tokens
        row = (min(row, context) if context else row) + budget + 1
        if len(group) * row * per_token > worst_bytes:
            worst_bytes, worst_row = len(group) * row * per_token, row
    return worst_bytes, worst_row


def check_batch_memory(cfg: RunConfig, lengths: list[int], shape: Optional[tuple[int, int, int]], budget: int,
                       context: Optional[int], available: Optional[int], when: str = "") -> None:
    """UsageError when the largest batch's KV cache would not fit the memory the machine has."""
    if cfg.decoding.batch_size <= 1 or shape is None or available is None or not lengths:
        return
    per_token = kv_bytes_per_token(shape, cfg.model.dtype)
    n = cfg.decoding.batch_size
    need, row = batch_cache_bytes(lengths, n, cfg.decoding.max_new_tokens, budget, per_token, context)
    if need > available:
        raise UsageError(f"--batch-size {n} needs about {need / 2**30:.1f} GiB of KV cache "
                         f"({min(n, len(lengths))} sequences x {row} tokens x {per_token / 1024:.0f} KiB"
                         f"{when}) but this machine has {available / 2**30:.1f} GiB available; use a smaller "
                         f"--batch-size or --max-new-tokens, or fewer long questions")


def device_memory(device: str, loaded: bool = False) -> Optional[int]:
    """Memory free for the KV cache on `device`: the machine's for a CPU; a GPU's once a model
    is loaded on it (None before: nothing is asked of CUDA before the model loads)."""
    if str(device).startswith("cpu"):
        return available_memory()
    if loaded and str(device).startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    return None


def check_batch_before_load(cfg: RunConfig, questions: list, budget: int) -> None:
    """--batch-size against the machine's memory, from the model's header and the questions' text."""
    if cfg.decoding.batch_size <= 1:
        return
    from specbench_cli.models.load import declared_context, declared_kv_shape

    lengths = [question_tokens(q, cfg.decoding.max_new_tokens) for q in questions]
    check_batch_memory(cfg, lengths, declared_kv_shape(cfg.model.name), budget, declared_context(cfg.model.name),
                       device_memory(cfg.model.device), " with prompt lengths estimated from their text")


def check_batch_loaded(cfg: RunConfig, questions: list, lm, budget: int) -> None:
    """The same as soon as the model is loaded (before calibration and decoding): its config's
    sizes, the first turns' exact lengths, the memory left after loading it."""
    if cfg.decoding.batch_size <= 1:
        return
    from specbench_cli.models.header import model_context_length
    from specbench_cli.models.load import model_kv_shape
    from specbench_cli.models.prompting import ChatPrompter, user_turn

    prompter = ChatPrompter(lm.tokenizer, cfg.model.prompt_template)
    lengths = [question_tokens(q, cfg.decoding.max_new_tokens, len(prompter(user_turn(q.turns[0])))) for q in questions]
    check_batch_memory(cfg, lengths, model_kv_shape(lm.target), budget, model_context_length(lm.target),
                       device_memory(cfg.model.device, loaded=True))
