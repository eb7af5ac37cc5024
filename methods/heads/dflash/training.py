"""DFlash training (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative Decoding")
on the frozen target (`specbench train heads --kind dflash`): the kind's own part, everything but
the `TrainerHooks` (specbench_cli/training/heads/dflash.py), which name this module's `build`,
`losses` and `checks` with the trainer's batches of a layer feature cache; code under methods/
imports nothing of `specbench_cli.training` (a layer above it in pyproject.toml).

Features: the target's hidden states after the drafter's `target_layer_ids` (its
`hidden_states[i + 1]`: the inputs of layers i + 1, or for the last layer the final state),
cached once with every position's token (a layer feature cache, training/heads/data.py, the one
EAGLE-3 uses; `--target-layers`, default z-lab's rule for `--layers` drafter layers).

Block-diffusion objective (`dflash_loss`): per sequence `--anchors` anchor positions a are drawn
(seeded by seed and step) among the positions whose next token is a response token; each anchor
makes one block [token a, mask, ..., mask] at positions a..a+B-1 that sees the context features
of positions 0..a-1 only (plus its own block, both ways), exactly what the drafter sees at
inference when token a is the last verified one. All blocks of a batch run in one drafter
forward (one attention mask). Block position k (1..B-1) is scored by cross-entropy against the
data's token a+k (the target's own answer in distillation data) where that token is a response
token, weighted by the paper's exp(-(k-1)/gamma) (gamma 7 at block size 16, 5 at 10, 4 at 8;
`--loss-gamma`, otherwise 7 B/16): the early positions, which every accepted prefix needs,
count most. The loss is the weighted mean over the batch's scored positions.

The new drafter's geometry is the target's (hidden size, heads, head size, MLP width, RoPE); its
final norm starts as the target's final norm (its states feed the target's LM head). Mask token:
`--mask-token` (default the last row of the target's embedding, which a tokenizer with spare
embedding rows never emits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from specbench_cli.errors import UsageError

PAPER_GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}


def loss_gamma(block_size: int, given: float | None = None) -> float:
    """The decay of the per-position loss weight exp(-(k-1)/gamma)."""
    if given is not None:
        return float(given)
    return PAPER_GAMMA.get(block_size, 7.0 * block_size / 16)


def target_layers_for(recipe: Any, n_target: int) -> tuple[int, ...]:
    """The target layers the drafter reads: --target-layers, else z-lab's rule for --layers."""
    from specbench_cli.methods.heads.dflash.model import default_target_layers

    ids = recipe.target_layers or default_target_layers(n_target, recipe.layers)
    if any(not 0 <= i < n_target for i in ids):
        raise UsageError(f"--target-layers {','.join(map(str, ids))}: the target has {n_target} layers "
                         f"(indices 0..{n_target - 1})")
    return tuple(int(i) for i in ids)


def parse_target_layers(text: str | None) -> tuple[int, ...] | None:
    """'1,9,17' -> (1, 9, 17); UsageError unless non-negative integers."""
    if text is None:
        return None
    try:
        ids = tuple(int(x) for x in text.split(","))
    except ValueError:
        ids = ()
    if not ids or any(i < 0 for i in ids):
        raise UsageError(f"--target-layers must be layer indices A,B,... (got '{text}')")
    return ids


def check_cache(cache: Any, folder: Path | str, layers: tuple[int, ...]) -> None:
    """UsageError unless `cache` holds exactly the hidden states `layers` (hidden_states indices)."""
    if cache.kind != "eagle3":
        raise UsageError(f"feature cache {folder} holds only the last hidden state (a medusa/eagle/hydra cache); "
                         f"--kind dflash needs several layers' states: pass the distillation JSONL, or another "
                         f"--features folder")
    have = [int(i) for i in cache.meta.get("feature_layers") or []]
    if layers and have != list(layers):
        raise UsageError(f"feature cache {folder} holds hidden states {have}, this drafter reads {list(layers)}")


def drafter_config(target_config: Any, n_layers: int, layer_ids: tuple[int, ...], block_size: int,
                   mask_token: int) -> dict:
    """z-lab's config.json of a new drafter shaped like the target."""
    c = target_config
    h, heads = int(c.hidden_size), int(c.num_attention_heads)
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": h,
           "intermediate_size": int(c.intermediate_size), "num_hidden_layers": int(n_layers),
           "num_attention_heads": heads, "num_key_value_heads": int(getattr(c, "num_key_value_heads", None) or heads),
           "head_dim": int(getattr(c, "head_dim", None) or h // heads), "hidden_act": "silu",
           "rms_norm_eps": float(getattr(c, "rms_norm_eps", 1e-6)), "attention_bias": False,
           "max_position_embeddings": int(getattr(c, "max_position_embeddings", 4096)),
           "vocab_size": int(c.vocab_size), "num_target_layers": int(c.num_hidden_layers), "block_size": block_size,
           "dflash_config": {"block_size": block_size, "mask_token_id": int(mask_token),
                             "target_layer_ids": [int(i) for i in layer_ids]}}
    rope = getattr(c, "rope_parameters", None)
    if isinstance(rope, dict):
        cfg["rope_parameters"] = dict(rope)
    elif getattr(c, "rope_theta", None) is not None:
        cfg["rope_theta"] = float(c.rope_theta)
    return cfg


def build_dflash(target: Any, recipe: Any):
    from specbench_cli.methods.heads.dflash.model import DFlashDrafter

    n_target = int(target.config.num_hidden_layers)
    rows = int(target.get_input_embeddings().weight.shape[0])
    mask = rows - 1 if recipe.mask_token is None else recipe.mask_token
    if not 0 <= mask < rows:
        raise UsageError(f"--mask-token {mask}: the target's embedding has {rows} rows")
    cfg = drafter_config(target.config, recipe.layers, target_layers_for(recipe, n_target), recipe.block_size, mask)
    torch.manual_seed(recipe.seed)
    head = DFlashDrafter(cfg).bind(target)
    norm = getattr(target.get_decoder(), "norm", None)
    if norm is not None and getattr(norm, "weight", None) is not None and norm.weight.shape == head.norm.weight.shape:
        with torch.no_grad():
            head.norm.weight.copy_(norm.weight.float())
    return head


# ----------------------------------------------------------------------------- the objective

def sample_anchors(loss_mask: torch.Tensor, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(anchors [B, n] long, keep [B, n] bool): per row up to n distinct positions a with
    loss_mask[a] (token a+1 is a response token), drawn by `generator`, sorted; rows with fewer
    candidates repeat their first and mark the extra ones not kept."""
    b = loss_mask.shape[0]
    anchors = torch.zeros(b, n, dtype=torch.long)
    keep = torch.zeros(b, n, dtype=torch.bool)
    for i in range(b):
        cand = loss_mask[i].nonzero().flatten().cpu()
        if cand.numel() == 0:
            continue
        take = cand[torch.randperm(cand.numel(), generator=generator)[:n]].sort().values
        anchors[i, :take.numel()] = take
        anchors[i, take.numel():] = take[0]
        keep[i, :take.numel()] = True
    return anchors, keep


def block_mask(anchors: torch.Tensor, valid: torch.Tensor, block_size: int) -> torch.Tensor:
    """[B, 1, A*bs, T + A*bs] bool: a block anchored at a sees the real context positions < a and
    its own block (both ways), nothing else."""
    b, a = anchors.shape
    t = valid.shape[1]
    ctx = (torch.arange(t, device=valid.device)[None, None, :] < anchors[:, :, None]) & valid[:, None, :]  # [B,A,T]
    ctx = ctx.repeat_interleave(block_size, dim=1)  # [B, A*bs, T]
    which = torch.arange(a, device=valid.device).repeat_interleave(block_size)
    own = (which[:, None] == which[None, :]).expand(b, -1, -1)  # [B, A*bs, A*bs]
    return torch.cat([ctx, own], dim=-1)[:, None]


def dflash_forward(head: Any, layers: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor,
                   anchors: torch.Tensor) -> torch.Tensor:
    """Final states [B, A, bs, h] of the blocks anchored at `anchors` [B, A], each over the
    context features `layers` [B, T, n h_t] before its anchor."""
    b, t = tokens.shape
    bs, a = head.block_size, anchors.shape[1]
    positions = torch.arange(t, device=tokens.device).expand(b, -1)
    kv = head.context(layers, positions)
    offs = torch.arange(bs, device=tokens.device)
    block_pos = (anchors[:, :, None] + offs).reshape(b, a * bs)
    block_tok = torch.full((b, a, bs), head.mask_token_id, dtype=torch.long, device=tokens.device)
    block_tok[:, :, 0] = tokens.gather(1, anchors)
    states = head.block_states(kv, block_tok.reshape(b, a * bs), block_pos, block_mask(anchors, valid, bs))
    return states.view(b, a, bs, -1)


def dflash_loss(head: Any, batch: tuple, anchors_per_seq: int, gamma: float | None,
                generator: torch.Generator) -> tuple[torch.Tensor, dict]:
    """The weighted block cross-entropy (module docstring) and logs (`ce`, `top1_h{k}` for the
    first positions' accuracy against the data)."""
    tokens, _last, valid, loss_mask, layers, _top1 = batch
    b, t = tokens.shape
    bs = head.block_size
    anchors, keep = sample_anchors(loss_mask, anchors_per_seq, generator)
    anchors, keep = anchors.to(tokens.device), keep.to(tokens.device)
    states = dflash_forward(head, layers, tokens, valid, anchors)[:, :, 1:]  # [B, A, bs-1, h]
    where = anchors[:, :, None] + torch.arange(1, bs, device=tokens.device)  # the token each position predicts
    inside = where < t
    idx = where.clamp(max=t - 1)
    labels = tokens.gather(1, idx.flatten(1)).view_as(idx)
    scored = loss_mask.gather(1, (idx - 1).flatten(1)).view_as(idx) & inside & keep[:, :, None]
    g = loss_gamma(bs, gamma)
    weight = torch.exp(-torch.arange(bs - 1, device=tokens.device, dtype=torch.float32) / g)
    w = weight.expand_as(scored) * scored
    if not bool(scored.any()):
        zero = states.sum() * 0.0
        return zero, {"ce": 0.0}
    logits = head.logits(states[scored]).float()
    ce = torch.nn.functional.cross_entropy(logits, labels[scored], reduction="none")
    loss = (ce * w[scored]).sum() / w[scored].sum()
    logs = {"ce": loss.item()}
    with torch.no_grad():
        hit = logits.argmax(-1) == labels[scored]
        pos = torch.nonzero(scored)[:, 2]
        for k in range(min(3, bs - 1)):
            sel = pos == k
            if bool(sel.any()):
                logs[f"top1_h{k}"] = float(hit[sel].float().mean())
    return loss, logs


# ----------------------------------------------------------------------------- trainer hooks

def build(recipe: Any, target: Any, cache: Any, resume_from: Path | None, vocab_file: Path | None):
    """(drafter, the target's LM head, no separate vocabulary file, summary fields) of a DFlash run."""
    layers = target_layers_for(recipe, int(target.config.num_hidden_layers))
    check_cache(cache, "given to the trainer", tuple(i + 1 for i in layers))
    head = build_dflash(target, recipe)
    extra = {"block_size": recipe.block_size, "target_layer_ids": list(layers), "mask_token_id": head.mask_token_id,
             "anchors": recipe.anchors, "loss_gamma": loss_gamma(recipe.block_size, recipe.loss_gamma)}
    return head, target.get_output_embeddings().weight, None, extra


def losses(head: Any, batch: tuple, weight: torch.Tensor, recipe: Any, step: int):
    """The block objective of one step (its anchors seeded by seed and step); no discriminator rows."""
    g = torch.Generator().manual_seed(recipe.seed * 104729 + step * 31 + 7)
    loss, logs = dflash_loss(head, batch, recipe.anchors, recipe.loss_gamma, g)
    logs["distill"] = loss.item()
    return loss, logs, []


def checks(recipe: Any) -> list[tuple[bool, str]]:
    """(ok, message) of the recipe options that apply to a DFlash run."""
    return [(not recipe.adversarial, "--adversarial applies to medusa, eagle and hydra heads, not dflash"),
            (2 <= recipe.block_size <= 1024, "--block-size must be in [2, 1024]"),
            (recipe.anchors >= 1, "--anchors must be >= 1"),
            (recipe.loss_gamma is None or recipe.loss_gamma > 0, "--loss-gamma must be > 0"),
            (recipe.mask_token is None or recipe.mask_token >= 0, "--mask-token must be a token id"),
            (recipe.target_layers is None or len(recipe.target_layers) >= 1, "--target-layers needs a layer")]
