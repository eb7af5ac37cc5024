"""White-box distillation fine-tuning of a drafter against the target, plus the generic
resumable training loop shared with `scratch` pretraining and the agreement evaluation.

Data: rows of the distillation JSONL (see distill_data.py). Each row becomes
    input_ids = chat_prompt(instruction) + tokens(response) [+ eos if the target finished]
and the loss positions are the positions whose *next* token is a response token, so with
prompt length P and response length R the positions P-1 .. P+R-2 predict the response.

Step schedule: with --pretrain-mix m, step s (0-based) is a pretraining step iff
floor((s+1) m) > floor(s m), i.e. a fraction m of the optimizer steps are plain next-token
cross-entropy steps on chunks of pretraining text; the others are distillation steps.
Batches are chosen from (seed, step) only, so a resumed run sees the same batches.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.models.prompting import stop_token_ids
from specbench_cli.training.common.io import DRAFTER_META, write_json
from specbench_cli.training.common.loop import TrainConfig, checkpoints, train_loop
from specbench_cli.training.draft_model.distill_data import chat_prompt, data_template, row_template
from specbench_cli.training.draft_model.losses import LOSSES, distill_loss, kld, tvd

# ----------------------------------------------------------------------------- data

@dataclass
class Example:
    """One tokenised distillation row: input_ids (L,) and the loss positions (indices < L-1)."""

    input_ids: list[int]
    start: int  # first position whose next token is a response token (P - 1)
    end: int    # one past the last such position (P + R - 1)


def build_examples(rows: list[dict], tokenizer: Any, model: Any, max_len: int = 384) -> list[Example]:
    """Tokenise distillation rows; responses are truncated so the whole sequence fits `max_len`.
    Rows whose prompt alone leaves no room for a response token are dropped."""
    eos = stop_token_ids(tokenizer, model)[:1]
    examples = []
    for row in rows:
        prompt = chat_prompt(tokenizer, row["instruction"], row_template(row))
        resp = tokenizer(row["response"], add_special_tokens=False)["input_ids"]
        if row.get("finished"):
            resp = resp + eos
        resp = resp[: max(0, max_len - len(prompt))]
        if not resp:
            continue
        examples.append(Example(prompt + resp, len(prompt) - 1, len(prompt) + len(resp) - 1))
    return examples


def collate(examples: list[Example], pad_id: int, device=None):
    """Right-pad a batch. Returns input_ids (B, T) long, attention_mask (B, T) long,
    loss_mask (B, T) bool marking the positions that predict response tokens (on `device`)."""
    import torch

    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    loss_mask = torch.zeros((len(examples), width), dtype=torch.bool)
    for i, e in enumerate(examples):
        ids[i, : len(e.input_ids)] = torch.tensor(e.input_ids)
        att[i, : len(e.input_ids)] = 1
        loss_mask[i, e.start:e.end] = True
    return ids.to(device), att.to(device), loss_mask.to(device)


def split_rows(rows: list[dict], holdout: float) -> tuple[list[dict], list[dict]]:
    """Split rows into (train, held_out) by instruction, so every temperature of a held-out
    instruction is held out. Deterministic: an instruction is held out iff the first 8 hex
    digits of sha1(instruction) / 16^8 < holdout."""
    if not 0 <= holdout < 1:
        raise UsageError(f"--holdout must be in [0, 1), got {holdout}")

    def held(row):
        h = int(hashlib.sha1(row["instruction"].encode()).hexdigest()[:8], 16) / 16 ** 8
        return h < holdout

    train = [r for r in rows if not held(r)]
    return train, [r for r in rows if held(r)]


def check_distill_rows(rows: list[dict], path: Path, template: str | None = None) -> str:
    """Row fields, and one prompt template matching `template` (a command's --prompt-template;
    None = whatever the data has). Returns the data's template."""
    for i, r in enumerate(rows, 1):
        if not isinstance(r.get("instruction"), str) or not isinstance(r.get("response"), str):
            raise UsageError(f"distillation file {path} row {i} lacks 'instruction'/'response' strings")
        if not isinstance(r.get("prompt_template", "auto"), str):
            raise UsageError(f"distillation file {path} row {i}: 'prompt_template' must be a string")
    return data_template(rows, path, template)


def pretrain_chunks(text: str, tokenizer: Any, seq_len: int) -> list[list[int]]:
    """Tokenise plain text and cut it into consecutive chunks of `seq_len` + 1 tokens
    (inputs and shifted labels). UsageError when the text is shorter than one chunk."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    n = len(ids) // (seq_len + 1)
    if n == 0:
        raise UsageError(f"pretraining text has {len(ids)} tokens, fewer than one chunk of {seq_len + 1}")
    return [ids[i * (seq_len + 1):(i + 1) * (seq_len + 1)] for i in range(n)]


def batch_indices(n: int, batch_size: int, index: int, seed: int) -> list[int]:
    """Indices of batch number `index` when n items are visited epoch by epoch, each epoch in a
    fresh permutation drawn from (seed, epoch); depends on nothing else, so resuming is exact."""
    import torch

    per_epoch = max(1, n // batch_size)
    epoch, i = divmod(index, per_epoch)
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=g).tolist()
    while len(perm) < batch_size:
        perm += perm
    return perm[i * batch_size:(i + 1) * batch_size]


def is_pretrain_step(step: int, mix: float) -> bool:
    """Step `step` (0-based) is a pretraining step iff floor((step+1) mix) > floor(step mix)."""
    return math.floor((step + 1) * mix) > math.floor(step * mix)


# ----------------------------------------------------------------------------- model helpers

def position_logits(model: Any, input_ids, attention_mask, loss_mask):
    """Logits only at the selected positions: (B, T) inputs, (B, T) bool mask -> (N, V).

    Runs the decoder once and applies the output head to the N selected hidden states only
    (the head is the costliest layer of a small drafter with a 49k vocabulary)."""
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return model.get_output_embeddings()(hidden[loss_mask])


def model_device(model: Any):
    """Device of a model's parameters."""
    return next(model.parameters()).device


def next_token_loss(model: Any, ids):
    """Mean next-token cross-entropy of `model` on chunks ids (B, S+1): inputs ids[:, :-1],
    labels ids[:, 1:]."""
    import torch.nn.functional as F

    logits = model(input_ids=ids[:, :-1]).logits  # (B, S, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def check_same_vocab(drafter: Any, target: Any) -> None:
    dv, tv = drafter.config.vocab_size, target.config.vocab_size
    if dv != tv:
        raise UsageError(f"drafter vocabulary ({dv}) differs from the target's ({tv}); "
                         "a drafter must share the target's tokenizer")


def agreement(drafter: Any, target: Any, examples: list[Example], pad_id: int, batch_size: int = 8) -> dict:
    """How well the drafter matches the target on the response positions of `examples`
    (teacher forcing on the given responses).

    Returns {"top1": share of positions where argmax q == argmax p, "tvd": mean TVD
    (1 - tvd is the expected per-token acceptance of speculative sampling at T=1),
    "kld": mean KL(p||q), "tokens": number of positions}.
    """
    import torch

    if not examples:
        raise UsageError("no evaluation example (empty held-out split?)")
    was_training = drafter.training
    drafter.eval()
    tot = {"top1": 0.0, "tvd": 0.0, "kld": 0.0, "tokens": 0}
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            ids, att, mask = collate(examples[i:i + batch_size], pad_id, model_device(target))
            t = position_logits(target, ids, att, mask)
            d = position_logits(drafter, ids, att, mask)
            n = t.shape[0]
            tot["top1"] += (t.argmax(-1) == d.argmax(-1)).sum().item()
            tot["tvd"] += tvd(t, d).item() * n
            tot["kld"] += kld(t, d).item() * n
            tot["tokens"] += n
    drafter.train(was_training)
    n = tot["tokens"]
    return {"top1": tot["top1"] / n, "tvd": tot["tvd"] / n, "kld": tot["kld"] / n, "tokens": n}


def cache_target_logits(target: Any, examples: list[Example], pad_id: int, batch_size: int = 8,
                        dtype: str = "float16") -> list:
    """Target logits on the loss positions of every example, computed once.

    Returns one tensor per example of shape (end - start, V) in `dtype` (float16 halves the
    memory; the rounding of logits, ~1e-3 relative, is far below the drafter/target gap).
    Concatenating the tensors of a batch in batch order equals `position_logits(target, ...)`
    on the collated batch (rows in row-major mask order).
    """
    import torch

    cached = []
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i:i + batch_size]
            logits = position_logits(target, *collate(chunk, pad_id, model_device(target)))
            cached += list(logits.to(getattr(torch, dtype)).cpu().split([e.end - e.start for e in chunk]))
    return cached


# ----------------------------------------------------------------------------- fine-tuning

# ~80 lines: data split, optional target-logit cache, the two step kinds (distil / pretrain) and the
# held-out evaluation share local state; split apart they would pass ten arguments around.
def finetune(drafter: Any, target: Any, tokenizer: Any, rows: list[dict], out: Path, loss: str,
             cfg: TrainConfig, pretrain_text: str | None = None, pretrain_mix: float = 0.0,
             max_len: int = 384, holdout: float = 0.2, meta: dict | None = None, resume: bool = False,
             progress: bool = True, eval_batch_size: int = 8, pretrain_seq_len: int = 128,
             cache_target: bool = False) -> dict:
    """Distil `target` into `drafter` on the distillation `rows` (see the module docstring).

    Held-out instructions (`split_rows(rows, holdout)`) are never trained on; `agreement` on
    them is measured before (fresh runs only) and after training and stored in training.json
    under "eval_before" / "eval_after". Pretraining steps use chunks of `pretrain_seq_len` tokens.
    With `cache_target`, the target's logits on the training examples are computed once
    (float16, see `cache_target_logits`) instead of once per step: about twice as fast on CPU
    when the data is visited several times, at V * 2 bytes per response token of memory.
    """
    import torch

    t_start = time.time()
    if loss not in LOSSES:
        from specbench_cli.errors import unknown

        raise unknown("loss", loss, LOSSES)
    if not 0 <= pretrain_mix < 1:
        raise UsageError(f"--pretrain-mix must be in [0, 1), got {pretrain_mix}")
    if pretrain_mix > 0 and not pretrain_text:
        raise UsageError("--pretrain-mix > 0 needs --pretrain-text FILE")
    if max_len < 8 or pretrain_seq_len < 8:
        raise UsageError("--max-len and --pretrain-seq-len must be >= 8")
    check_same_vocab(drafter, target)
    train_rows, eval_rows = split_rows(rows, holdout)
    train_ex = build_examples(train_rows, tokenizer, target, max_len)
    eval_ex = build_examples(eval_rows, tokenizer, target, max_len)
    if not train_ex:
        raise UsageError("no training example left after the held-out split; lower --holdout or add data")
    chunks = pretrain_chunks(pretrain_text, tokenizer, pretrain_seq_len) if pretrain_mix > 0 else []
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_token_ids(target, tokenizer)[0]
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    cached = cache_target_logits(target, train_ex, pad_id, eval_batch_size) if cache_target else None
    device = model_device(drafter)

    def step_fn(step: int):
        n_pre = math.floor((step + 1) * pretrain_mix)  # pretraining steps up to and including `step`
        if chunks and is_pretrain_step(step, pretrain_mix):
            idx = batch_indices(len(chunks), cfg.batch_size, n_pre - 1, cfg.seed + 1)
            ids = torch.tensor([chunks[i] for i in idx], device=device)
            ce = next_token_loss(drafter, ids)
            return ce, {"pretrain_ce": ce.item()}
        idx = batch_indices(len(train_ex), cfg.batch_size, step - n_pre, cfg.seed)
        ids, att, mask = collate([train_ex[i] for i in idx], pad_id, device)
        if cached is not None:
            t = torch.cat([cached[i] for i in idx]).to(device).float()
        else:
            with torch.no_grad():
                t = position_logits(target, ids, att, mask)
        d = position_logits(drafter, ids, att, mask)
        value = distill_loss(loss, t, d)
        with torch.no_grad():
            logs = {"loss": value.item(), "tvd": tvd(t, d).item(), "kld": kld(t, d).item(),
                    "top1": (t.argmax(-1) == d.argmax(-1)).float().mean().item()}
        return value, logs

    meta = {**(meta or {}), "kind": "finetune", "loss": loss, "pretrain_mix": pretrain_mix, "max_len": max_len,
            "pretrain_seq_len": pretrain_seq_len, "holdout": holdout, "train_rows": len(train_rows),
            "eval_rows": len(eval_rows), "cache_target": cache_target, "train_examples": len(train_ex),
            "eval_examples": len(eval_ex), "pretrain_chunks": len(chunks)}
    if eval_ex and not resume:
        meta["eval_before"] = agreement(drafter, target, eval_ex, pad_id, eval_batch_size)
    elif resume and checkpoints(out):
        previous = json.loads((checkpoints(out)[-1] / DRAFTER_META).read_text())
        if "eval_before" in previous:
            meta["eval_before"] = previous["eval_before"]
    drafter.train()
    summary = train_loop(drafter, tokenizer, out, cfg, step_fn, meta, resume=resume, progress=progress,
                         title=f"finetune {loss}")
    if eval_ex:
        summary["eval_after"] = agreement(drafter, target, eval_ex, pad_id, eval_batch_size)
    summary["wall_seconds_total"] = round(time.time() - t_start, 2)  # + target cache and evaluations
    write_json(Path(out) / "training.json", summary)
    write_json(Path(out) / DRAFTER_META, summary)
    return summary
