"""`specbench train sft|msn`: full fine-tuning of a target on instruction/response JSONL, with
(msn) or without (sft) Make-Some-Noise input noise.

Data: the rows of `train drafter distill-data` (the target's own answers), tokenised exactly as
the drafter pipeline does (finetune.build_examples: chat prompt + response [+ eos]); the loss is
the mean next-token cross-entropy over all response tokens of the batch (Eq. 2 for sft, Eq. 3
for msn: the same labels, only the inputs of one segment per response replaced, see noise.py).

Equal budget: batch b of step s is `batch_indices(n, batch_size, s, seed)` and the noise comes
from a generator seeded with (seed, s) that is used for nothing else, so an sft and an msn run
with the same options see the same batches in the same order, and a resumed run continues
exactly as an uninterrupted one would.

LoRA (`lora_rank`): the same recipe on peft adapters over the frozen base; the saved folders
hold the merged weights (sft_lora.py).

Compute: the weights and AdamW state stay float32; `autocast` = "bfloat16" runs forward and
backward under CPU bfloat16 autocast (several times faster on this CPU), "float32" does not.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.training.common.compute import autocast
from specbench_cli.training.common.io import DRAFTER_META, write_json
from specbench_cli.training.common.loop import TrainConfig, checkpoints, train_loop
from specbench_cli.training.draft_model.distill_data import stop_token_ids
from specbench_cli.training.draft_model.finetune import batch_indices, build_examples, collate, model_device, split_rows
from specbench_cli.training.sft.noise import NoiseConfig, apply_noise

AUTOCAST = ("float32", "bfloat16")
EVAL_NOISE = NoiseConfig(4, "ahead", "random")  # held-out denoising probe, the same for sft and msn


def check_autocast(name: str) -> str:
    if name not in AUTOCAST:
        raise UsageError(f"--dtype must be one of {', '.join(AUTOCAST)} (compute under autocast; weights "
                         f"stay float32), got '{name}'")
    return name


def _autocast(name: str, device):
    return autocast(name != "float32", device)


def noise_generator(seed: int, step: int):
    """The only source of noise randomness at `step` (independent of batch choice and dropout)."""
    import torch

    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7_919 + 17) % (2 ** 62))


def token_losses(model: Any, ids, att):
    """Per-position next-token CE of the clean inputs: ids, att (B, T) -> (B, T) float32,
    entry t = -log P(ids[t+1] | ids[:t+1]) (the last column is 0)."""
    import torch
    import torch.nn.functional as F

    logits = model(input_ids=ids, attention_mask=att).logits.float()  # (B, T, V)
    ce = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")  # (B, T-1)
    return torch.cat([ce, ce.new_zeros(ce.shape[0], 1)], dim=1)


def batch_loss(model: Any, ids, att, loss_mask, noise_mask=None, inputs=None) -> tuple[Any, dict]:
    """Mean CE of the GOLD next tokens at `loss_mask` positions given `inputs` (default: ids).

    ids/att/loss_mask/noise_mask (B, T). Only the selected hidden states go through the output
    head (vocabulary 49k: the head would otherwise dominate). Logs: loss, and with a noise mask
    noise_loss / noise_top1 on the positions whose input was replaced (their labels are gold)."""
    import torch
    import torch.nn.functional as F

    inputs = ids if inputs is None else inputs
    hidden = model.get_decoder()(input_ids=inputs, attention_mask=att).last_hidden_state  # (B, T, H)
    logits = model.get_output_embeddings()(hidden[loss_mask]).float()  # (N, V)
    gold = torch.roll(ids, -1, dims=1)[loss_mask]  # (N,) next tokens; loss positions are < T-1
    ce = F.cross_entropy(logits, gold, reduction="none")
    logs = {"loss": ce.mean().item()}
    if noise_mask is not None and noise_mask.any():
        sel = noise_mask[loss_mask]
        logs["noise_loss"] = ce[sel].mean().item()
        logs["noise_top1"] = (logits[sel].argmax(-1) == gold[sel]).float().mean().item()
    return ce.mean(), logs


def evaluate(model: Any, examples: list, pad_id: int, batch_size: int = 8, seed: int = 0, autocast="float32") -> dict:
    """Held-out probe: clean CE and top-1, and top-1 / CE at positions after EVAL_NOISE (ahead,
    L=4) - how well the model denoises, the ability MSN trains. Same noise for every model."""
    import torch

    was = model.training
    model.eval()
    tot = {"ce": 0.0, "top1": 0.0, "n": 0, "noise_ce": 0.0, "noise_top1": 0.0, "noise_n": 0}
    vocab = model.config.vocab_size
    with torch.no_grad(), _autocast(autocast, model_device(model)):
        for i in range(0, len(examples), batch_size):
            chunk = examples[i:i + batch_size]
            ids, att, mask = collate(chunk, pad_id, model_device(model))
            _, clean = batch_loss(model, ids, att, mask)
            top = _top1(model, ids, att, mask)
            noisy, nmask = apply_noise(ids, chunk, EVAL_NOISE, vocab, noise_generator(seed, -1 - i))
            _, logs = batch_loss(model, ids, att, mask, nmask, noisy)
            n, nn = int(mask.sum()), int(nmask.sum())
            tot["ce"] += clean["loss"] * n
            tot["top1"] += top * n
            tot["n"] += n
            if nn:
                tot["noise_ce"] += logs["noise_loss"] * nn
                tot["noise_top1"] += logs["noise_top1"] * nn
                tot["noise_n"] += nn
    model.train(was)
    n, nn = max(tot["n"], 1), max(tot["noise_n"], 1)
    return {"ce": tot["ce"] / n, "top1": tot["top1"] / n, "noise_ce": tot["noise_ce"] / nn,
            "noise_top1": tot["noise_top1"] / nn, "tokens": tot["n"], "noise_tokens": tot["noise_n"]}


def _top1(model, ids, att, mask) -> float:
    import torch

    hidden = model.get_decoder()(input_ids=ids, attention_mask=att).last_hidden_state
    pred = model.get_output_embeddings()(hidden[mask]).argmax(-1)
    return (pred == torch.roll(ids, -1, dims=1)[mask]).float().mean().item()


# ~70 lines: the sft/msn step (noise applied per batch) and the optional LoRA wrap/save/restore hooks
# are closures over the same examples and model; the loop itself is trainloop.train_loop.
def train_sft(model: Any, tokenizer: Any, rows: list[dict], out: Path, cfg: TrainConfig,
              noise: NoiseConfig | None = None, max_len: int = 384, holdout: float = 0.05,
              autocast: str = "float32", meta: dict | None = None, resume: bool = False,
              progress: bool = True, lora_rank: int | None = None, lora_alpha: float | None = None) -> dict:
    """Fine-tune `model` on `rows`; `noise` None = sft, else msn; `lora_rank` None = all weights,
    else LoRA adapters (merged into the saved folders). Returns the training summary (also
    out/training.json); the final model is a Hugging Face folder at `out`."""
    import torch

    from specbench_cli.training.common.io import save_model_folder
    from specbench_cli.training.common.loop import restore_weights
    from specbench_cli.training.sft.lora import check_lora, lora_stats, restore_adapter, save_merged, wrap

    t_start = time.time()
    check_autocast(autocast)
    if noise is not None:
        noise.validate()
    if max_len < 8:
        raise UsageError("--max-len must be >= 8")
    check_lora(lora_rank, lora_alpha)
    lora = None
    if lora_rank is not None:
        model = wrap(model, lora_rank, lora_alpha)
        lora = {"rank": lora_rank, "alpha": float(lora_alpha if lora_alpha is not None else 2 * lora_rank),
                **lora_stats(model)}
    train_rows, eval_rows = split_rows(rows, holdout)
    train_ex = build_examples(train_rows, tokenizer, model, max_len)
    eval_ex = build_examples(eval_rows, tokenizer, model, max_len)
    if not train_ex:
        raise UsageError("no training example left after the held-out split; lower --holdout or add data")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_token_ids(tokenizer, model)[0]
    device = model_device(model)
    vocab = model.config.vocab_size

    def step_fn(step: int):
        batch = [train_ex[i] for i in batch_indices(len(train_ex), cfg.batch_size, step, cfg.seed)]
        ids, att, mask = collate(batch, pad_id, device)
        with _autocast(autocast, device):
            if noise is None:
                return batch_loss(model, ids, att, mask)
            ce = None
            if noise.position == "loss":
                with torch.no_grad():
                    ce = token_losses(model, ids, att)
            noisy, nmask = apply_noise(ids, batch, noise, vocab, noise_generator(cfg.seed, step), ce)
            return batch_loss(model, ids, att, mask, nmask, noisy)

    kind = "sft" if noise is None else "msn"
    meta = {**(meta or {}), "kind": kind, "noise": None if noise is None else vars(noise).copy(),
            "autocast": autocast, "lora": lora, "max_len": max_len, "holdout": holdout, "train_rows": len(train_rows),
            "eval_rows": len(eval_rows), "train_examples": len(train_ex), "eval_examples": len(eval_ex),
            "train_response_tokens": sum(e.end - e.start for e in train_ex)}
    if eval_ex and not resume:
        meta["eval_before"] = evaluate(model, eval_ex, pad_id, seed=cfg.seed, autocast=autocast)
    elif resume and checkpoints(out):  # keep the fresh run's "before" numbers
        previous = json.loads((checkpoints(out)[-1] / DRAFTER_META).read_text())
        if previous.get("lora") != lora:
            raise UsageError(f"--resume: the checkpoint was trained with lora={previous.get('lora')}, "
                             f"this run asks for lora={lora}; use the same --lora-rank/--lora-alpha")
        meta.update({k: previous[k] for k in ("eval_before",) if k in previous})
    model.train()
    title = kind if noise is None else f"msn L={noise.length} {noise.kind}/{noise.position}"
    summary = train_loop(model, tokenizer, out, cfg, step_fn, meta, resume=resume, progress=progress,
                         title=title + ("" if lora is None else f" LoRA r={lora_rank}"),
                         save_folder=save_model_folder if lora is None else save_merged,
                         restore=restore_weights if lora is None else restore_adapter)
    if eval_ex:
        summary["eval_after"] = evaluate(model, eval_ex, pad_id, seed=cfg.seed, autocast=autocast)
    summary["wall_seconds_total"] = round(time.time() - t_start, 2)
    write_json(Path(out) / "training.json", summary)
    return summary
