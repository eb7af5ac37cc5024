"""Prompts, stop tokens and threads: one definition for the benchmark and the training pipeline.

A drafter distilled on the target's answers must see prompts encoded exactly as the benchmark
encodes them, so both call `encode_chat` (tested: same conversation -> same ids).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from specbench_cli.errors import UsageError


def encode_chat(tokenizer: Any, messages: list[dict], template: str = "auto") -> list[int]:
    """Conversation -> prompt ids (generation prompt included), formatted by `template`
    (models/templates.py). `auto`: the tokenizer's chat template; without one, the turns
    joined by blank lines plus a trailing blank line, tokenized with its special tokens."""
    from specbench_cli.models.templates import encode

    return encode(tokenizer, messages, template)


def user_turn(text: str) -> list[dict]:
    """A one-turn conversation."""
    return [{"role": "user", "content": text}]


class ChatPrompter:
    """`encode_chat` bound to one tokenizer and template."""

    def __init__(self, tokenizer: Any, template: str = "auto") -> None:
        self.tok, self.template = tokenizer, template

    def __call__(self, messages: list[dict]) -> list[int]:
        return encode_chat(self.tok, messages, self.template)


def stop_token_ids(tokenizer: Any, model: Any) -> list[int]:
    """End-of-turn ids: the tokenizer's eos, then the model's generation eos (deduplicated)."""
    ids: list[Optional[int]] = []
    config = getattr(model, "generation_config", None)
    for src in (tokenizer.eos_token_id, getattr(config, "eos_token_id", None)):
        ids += list(src) if isinstance(src, (list, tuple)) else [src]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


def default_threads() -> int:
    """min(cores, 2): on shared CPUs more threads rarely help a small model."""
    return max(1, min(os.cpu_count() or 1, 2))


def set_threads(threads: Optional[int], default: Optional[int] = None) -> int:
    """Set torch intra-op threads to `threads` (or `default`; None leaves torch's own);
    return the number in effect. UsageError below 1."""
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1 (got {threads})")
    import torch

    n = threads or default
    if n:
        torch.set_num_threads(n)
    return torch.get_num_threads()
