"""`specbench train space`: semi-autoregressive supervised fine-tuning (SPACE, arXiv 2402.11809).

The target learns, besides its ordinary next-token predictions, to fill `k` [MASK] tokens placed
after a text with the tokens that follow the next one: the ability `methods/space.py` drafts with.

Mask token: the tokenizer's own mask token when it has one, else a new special token `[MASK]`
(`mask_token`), its embedding (and output row, when untied) initialised to the mean of the existing
rows; the id and `k` are written to the saved config.json (`space_mask_id`, `space_mask_num`),
where the `space` method reads them.

Sequences (per sample, per step, as the published recipe with `mask_efficient_train` off): with
probability `mask_prob` and a response of at least `k + 1` tokens, a position q of the response is
drawn uniformly among those with `k` response tokens after it; the input is `ids[:q]` followed by `k`
masks, and the labels are the gold tokens: every position before q predicts its next token (the
ordinary AR loss, q's own token included: the last real token predicts it), and mask j (0-based,
at position q + j) predicts `ids[q + j + 1]`, the token after the one the model would predict next.
Plain causal attention: a mask sees the text before q and the masks before it, exactly as a mask
group hanging from the root in the decoding tree. The other samples are ordinary SFT samples (full
response, AR loss only). The loss is the mean cross-entropy over every labelled position, mask
positions weighted by `mask_loss_weight` (1: the published setting).

Resumable: batch b of step s is `batch_indices(n, batch_size, s, seed)` and the mask placements
come from a generator seeded with (seed, s) used for nothing else, so a resumed run continues
exactly as an uninterrupted one (training/common/loop.py checkpoints weights, optimiser, RNGs).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.training.common.io import DRAFTER_META, write_json
from specbench_cli.training.common.loop import TrainConfig, checkpoints, train_loop
from specbench_cli.training.draft_model.distill_data import stop_token_ids
from specbench_cli.training.draft_model.finetune import Example, batch_indices, build_examples, model_device, split_rows
from specbench_cli.training.sft.train import _autocast, check_autocast

CONFIG_KEY = "space_mask_id"
CONFIG_NUM_KEY = "space_mask_num"
MASK_TOKEN = "[MASK]"


@dataclass
class SpaceConfig:
    k: int = 5                   # masks per sample (the number of tokens drafted per step)
    mask_prob: float = 0.5       # share of samples that get masks
    mask_loss_weight: float = 1.0

    def validate(self) -> None:
        if not 1 <= self.k <= 64:
            raise UsageError(f"--k must be between 1 and 64, got {self.k}")
        if not 0.0 < self.mask_prob <= 1.0:  # written so that NaN fails too
            raise UsageError(f"--mask-prob must be in (0, 1], got {self.mask_prob}")
        if not 0.0 < self.mask_loss_weight <= 100.0:
            raise UsageError(f"--mask-loss-weight must be in (0, 100], got {self.mask_loss_weight}")


def add_mask_token(model: Any, tokenizer: Any, k: int) -> int:
    """Give `tokenizer` a mask token (its own, or a new `[MASK]`) and `model` an embedding row for
    it (the mean of the existing rows, input and output); record the id and k in `model.config`.
    Deterministic, so a resumed run rebuilds the same model before loading its checkpoint."""
    import torch

    from specbench_cli.methods.space import mask_id_of_tokenizer

    mask_id = mask_id_of_tokenizer(tokenizer)
    if mask_id is None:
        tokenizer.add_special_tokens({"mask_token": MASK_TOKEN})
        mask_id = tokenizer.mask_token_id
    old = model.get_input_embeddings().weight.shape[0]
    if mask_id >= old:
        model.resize_token_embeddings(mask_id + 1, mean_resizing=False)
        with torch.no_grad():
            emb = model.get_input_embeddings().weight
            emb[old:] = emb[:old].mean(0)
            out = model.get_output_embeddings()
            if out is not None and out.weight.data_ptr() != emb.data_ptr():
                out.weight[old:] = out.weight[:old].mean(0)
                if getattr(out, "bias", None) is not None:
                    out.bias[old:] = out.bias[:old].mean()
    setattr(model.config, CONFIG_KEY, int(mask_id))
    setattr(model.config, CONFIG_NUM_KEY, int(k))
    return int(mask_id)


def mask_generator(seed: int, step: int):
    """The only source of mask-placement randomness at `step`."""
    import torch

    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7_919 + 29) % (2 ** 62))


def masked_batch(examples: list[Example], mask_id: int, pad_id: int, space: SpaceConfig, gen, device=None,
                 prob: float | None = None):
    """Inputs of one step. Returns inputs, attention, gold next tokens (B, T) and the bool masks
    `loss` (labelled positions) and `masked` (mask positions, a subset of `loss`)."""
    import torch

    prob = space.mask_prob if prob is None else prob
    k = space.k
    rows = []
    for e in examples:
        ids = list(e.input_ids)
        first, last = e.start + 1, e.end          # response tokens at first .. last (inclusive)
        draw = torch.rand((), generator=gen).item()
        span = last - k - first + 1               # choices of q in [first, last - k]
        q = None
        if draw < prob and span > 0:
            q = first + int(torch.randint(span, (), generator=gen).item())
        if q is None:
            rows.append((ids, ids[1:] + [pad_id], e.start, e.end, None))
        else:
            inputs = ids[:q] + [mask_id] * k
            gold = ids[1:q + k + 1]
            rows.append((inputs, gold, e.start, q + k, q))
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    gold = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    loss = torch.zeros((len(rows), width), dtype=torch.bool)
    masked = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (inp, g, lo, hi, q) in enumerate(rows):
        ids[i, :len(inp)] = torch.tensor(inp)
        gold[i, :len(g)] = torch.tensor(g)
        att[i, :len(inp)] = 1
        loss[i, lo:hi] = True
        if q is not None:
            masked[i, q:q + k] = True
    return ids.to(device), att.to(device), gold.to(device), loss.to(device), masked.to(device)


def space_loss(model: Any, ids, att, gold, loss, masked, weight: float = 1.0) -> tuple[Any, dict]:
    """Weighted mean CE of the gold tokens at the labelled positions; logs the AR and mask parts."""
    import torch
    import torch.nn.functional as F

    hidden = model.get_decoder()(input_ids=ids, attention_mask=att).last_hidden_state
    logits = model.get_output_embeddings()(hidden[loss]).float()   # only labelled rows through the head
    target = gold[loss]
    ce = F.cross_entropy(logits, target, reduction="none")
    is_mask = masked[loss]
    w = torch.where(is_mask, torch.full_like(ce, weight), torch.ones_like(ce))
    total = (ce * w).sum() / w.sum()
    logs = {"loss": total.item()}
    if (~is_mask).any():
        logs["ar_loss"] = ce[~is_mask].mean().item()
    if is_mask.any():
        logs["mask_loss"] = ce[is_mask].mean().item()
        logs["mask_top1"] = (logits[is_mask].argmax(-1) == target[is_mask]).float().mean().item()
    return total, logs


def evaluate(model: Any, examples: list, mask_id: int, pad_id: int, space: SpaceConfig, seed: int = 0,
             batch_size: int = 8, autocast: str = "float32") -> dict:
    """Held-out probe: AR CE on plain samples, and CE / top-1 of the masks with every sample masked
    (the same placements for every model: a generator seeded by `seed` only)."""
    import torch

    was = model.training
    model.eval()
    tot = {"ce": 0.0, "n": 0, "mask_ce": 0.0, "mask_top1": 0.0, "mask_n": 0}
    device = model_device(model)
    gen = mask_generator(seed, -1)
    with torch.no_grad(), _autocast(autocast, device):
        for i in range(0, len(examples), batch_size):
            chunk = examples[i:i + batch_size]
            plain = masked_batch(chunk, mask_id, pad_id, space, gen, device, prob=0.0)
            _, logs = space_loss(model, *plain)
            n = int(plain[3].sum())
            tot["ce"] += logs.get("ar_loss", 0.0) * n
            tot["n"] += n
            batch = masked_batch(chunk, mask_id, pad_id, space, gen, device, prob=1.0)
            _, logs = space_loss(model, *batch)
            m = int(batch[4].sum())
            if m:
                tot["mask_ce"] += logs["mask_loss"] * m
                tot["mask_top1"] += logs["mask_top1"] * m
                tot["mask_n"] += m
    model.train(was)
    n, m = max(tot["n"], 1), max(tot["mask_n"], 1)
    return {"ce": tot["ce"] / n, "mask_ce": tot["mask_ce"] / m, "mask_top1": tot["mask_top1"] / m,
            "tokens": tot["n"], "mask_tokens": tot["mask_n"]}


def train_space(model: Any, tokenizer: Any, rows: list[dict], out: Path, cfg: TrainConfig, space: SpaceConfig,
                max_len: int = 384, holdout: float = 0.05, autocast: str = "float32", meta: dict | None = None,
                resume: bool = False, progress: bool = True) -> dict:
    """Fine-tune `model` (all weights) with the SPACE objective on instruction/response `rows`.
    Returns the training summary (also out/training.json); the model is a Hugging Face folder at
    `out` whose config.json records the mask id."""
    t_start = time.time()
    check_autocast(autocast)
    space.validate()
    if max_len < space.k + 8:
        raise UsageError(f"--max-len must be >= k + 8 = {space.k + 8}")
    mask_id = add_mask_token(model, tokenizer, space.k)
    train_rows, eval_rows = split_rows(rows, holdout)
    train_ex = build_examples(train_rows, tokenizer, model, max_len)
    eval_ex = build_examples(eval_rows, tokenizer, model, max_len)
    if not train_ex:
        raise UsageError("no training example left after the held-out split; lower --holdout or add data")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_token_ids(tokenizer, model)[0]
    device = model_device(model)

    def step_fn(step: int):
        batch = [train_ex[i] for i in batch_indices(len(train_ex), cfg.batch_size, step, cfg.seed)]
        inputs = masked_batch(batch, mask_id, pad_id, space, mask_generator(cfg.seed, step), device)
        with _autocast(autocast, device):
            return space_loss(model, *inputs, weight=space.mask_loss_weight)

    meta = {**(meta or {}), "kind": "space", "space": vars(space).copy(), "mask_id": mask_id,
            "mask_token": tokenizer.convert_ids_to_tokens(mask_id), "autocast": autocast, "max_len": max_len,
            "holdout": holdout, "train_rows": len(train_rows), "eval_rows": len(eval_rows),
            "train_examples": len(train_ex), "eval_examples": len(eval_ex)}
    if eval_ex and not resume:
        meta["eval_before"] = evaluate(model, eval_ex, mask_id, pad_id, space, cfg.seed, autocast=autocast)
    elif resume and checkpoints(out):  # keep the fresh run's "before" numbers
        previous = json.loads((checkpoints(out)[-1] / DRAFTER_META).read_text())
        if previous.get("space") != meta["space"] or previous.get("mask_id") != mask_id:
            raise UsageError(f"--resume: the checkpoint was trained with {previous.get('space')} and mask id "
                             f"{previous.get('mask_id')}; this run asks for {meta['space']} and mask id {mask_id}")
        meta.update({key: previous[key] for key in ("eval_before",) if key in previous})
    model.train()
    summary = train_loop(model, tokenizer, out, cfg, step_fn, meta, resume=resume, progress=progress,
                         title=f"space k={space.k}")
    if eval_ex:
        summary["eval_after"] = evaluate(model, eval_ex, mask_id, pad_id, space, cfg.seed, autocast=autocast)
    summary["wall_seconds_total"] = round(time.time() - t_start, 2)
    write_json(Path(out) / "training.json", summary)
    return summary
