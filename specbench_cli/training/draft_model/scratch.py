"""A small Llama drafter built from scratch and pretrained on the user's plain text.

It uses the target's tokenizer and vocabulary size (so it can draft for that target) and
ties input and output embeddings. Pretraining is next-token cross-entropy on consecutive
chunks of the text, run by the shared resumable `train_loop` (checkpoints, resume, curve).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.training.common.loop import TrainConfig, train_loop
from specbench_cli.training.draft_model.finetune import batch_indices, next_token_loss, pretrain_chunks


def default_intermediate(hidden: int) -> int:
    """SwiGLU width ~ 8/3 * hidden, rounded up to a multiple of 64."""
    return 64 * math.ceil(8 * hidden / 3 / 64)


def scratch_config(vocab_size: int, layers: int, hidden: int, heads: int, kv_heads: int | None = None,
                   intermediate: int | None = None, max_positions: int = 2048, bos_token_id=None,
                   eos_token_id=None, pad_token_id=None):
    """LlamaConfig for a small drafter; UsageError on inconsistent sizes."""
    from transformers import LlamaConfig

    kv_heads = kv_heads or heads
    if layers < 1 or hidden < 8 or heads < 1:
        raise UsageError("--layers >= 1, --hidden >= 8 and --heads >= 1 are required")
    if hidden % heads:
        raise UsageError(f"--hidden ({hidden}) must be divisible by --heads ({heads})")
    if (hidden // heads) % 2:
        raise UsageError(f"head size hidden/heads = {hidden // heads} must be even (rotary embeddings)")
    if heads % kv_heads:
        raise UsageError(f"--heads ({heads}) must be divisible by --kv-heads ({kv_heads})")
    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads,
                       intermediate_size=intermediate or default_intermediate(hidden),
                       max_position_embeddings=max_positions, tie_word_embeddings=True,
                       bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=pad_token_id)


def pretrain_scratch(model: Any, tokenizer: Any, text: str, out: Path, cfg: TrainConfig, seq_len: int = 256,
                     meta: dict | None = None, resume: bool = False, progress: bool = True) -> dict:
    """Next-token pretraining of `model` on `text` chunks of `seq_len` (+1) tokens; see train_loop."""
    import torch

    if seq_len < 8:
        raise UsageError("--seq-len must be >= 8")
    chunks = pretrain_chunks(text, tokenizer, seq_len)

    def step_fn(step: int):
        ids = torch.tensor([chunks[i] for i in batch_indices(len(chunks), cfg.batch_size, step, cfg.seed)],
                           device=next(model.parameters()).device)
        ce = next_token_loss(model, ids)
        return ce, {"pretrain_ce": ce.item()}

    meta = {**(meta or {}), "kind": "scratch", "seq_len": seq_len, "chunks": len(chunks)}
    return train_loop(model, tokenizer, out, cfg, step_fn, meta, resume=resume, progress=progress,
                      title="pretrain scratch")
