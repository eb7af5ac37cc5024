"""EAGLE-3 training (Li et al. 2025, "EAGLE-3: ... via Training-Time Test") on the frozen target:
the kind's own part, everything that needs nothing of the trainer (`specbench_cli.training`, a
layer above methods/). The loss, the batches and the `TrainerHooks` that `specbench train heads
--kind eagle3` runs are in specbench_cli/training/heads/eagle3.py, on top of this module.

Features: the inputs of three target layers (`feature_layers`, EAGLE-3's 2, L//2, L-3 by default,
the rule the eagle3 method uses at inference), cached with the target's last hidden state and its
top-1 token (an EAGLE-3 feature cache, training/heads/data.py).

Draft vocabulary (`draft_vocabulary`): the N most frequent response tokens of the data (EAGLE-3
counts the loss-masked tokens), stored in the head as `d2t` (target = draft + d2t[draft]) and
`t2d` (bool over the target vocabulary).

Training-time test (`ttt_unroll`): step 0 reads fc(features) and token t+1 at position t; step
k > 0 reads the head's own step k-1 output at position t and token t+1+k, at RoPE position t+k.
Attention of step k at position t: the step-0 keys of positions 0..t (causal) plus the keys of
position t itself at steps 1..k (the "diagonal"): exactly what the head sees at inference when it
drafts a chain from position t (`tests/training/test_eagle3_training.py` checks it against
`Eagle3Head.step`).

The run's head (`build`: the new head, warm-started from the target, and the summary fields) and
its option checks (`checks`) are the trainer hooks' `build` and `checks`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import read_json

DEFAULT_DRAFT_VOCAB = 32000  # EAGLE-3's, capped at the target's vocabulary and at the tokens the data has


# ----------------------------------------------------------------------------- feature layers

def feature_layers_for(n_layers: int, given: tuple[int, ...] | None) -> tuple[int, int, int]:
    """The three target layers whose inputs an EAGLE-3 head reads: `given` (--feature-layers), else
    EAGLE-3's rule (the eagle3 method's own helper). UsageError (exit 2) when the target lacks them."""
    from specbench_cli.methods.heads.eagle3.model import default_feature_layers

    if given is None:
        if n_layers < 6:
            raise UsageError(f"EAGLE-3 reads the inputs of layers 2, L//2 and L-3: the target has only {n_layers} "
                             f"layers; pass --feature-layers A,B,C (each < {n_layers})")
        return default_feature_layers(n_layers)
    if any(not 0 <= i < n_layers for i in given):
        raise UsageError(f"--feature-layers {','.join(map(str, given))}: the target has {n_layers} layers "
                         f"(indices 0..{n_layers - 1})")
    return tuple(int(i) for i in given)  # type: ignore[return-value]


def parse_feature_layers(text: str | None) -> tuple[int, ...] | None:
    """'2,15,27' -> (2, 15, 27); UsageError unless three non-negative integers."""
    if text is None:
        return None
    try:
        layers = tuple(int(x) for x in text.split(","))
    except ValueError:
        layers = ()
    if len(layers) != 3 or any(i < 0 for i in layers):
        raise UsageError(f"--feature-layers must be three layer indices A,B,C (got '{text}')")
    return layers


def check_cache(cache: Any, folder: Path | str, layers: tuple[int, ...]) -> None:
    """UsageError unless `cache` is an EAGLE-3 cache of exactly `layers`."""
    if cache.kind != "eagle3":
        raise UsageError(f"feature cache {folder} holds only the last hidden state (a medusa/eagle/hydra cache); "
                         f"--kind eagle3 needs three layers' inputs: pass the distillation JSONL, or another "
                         f"--features folder")
    have = [int(i) for i in cache.meta.get("feature_layers") or []]
    if have != list(layers):
        raise UsageError(f"feature cache {folder} holds the inputs of layers {have}, this head reads {list(layers)}")


# ----------------------------------------------------------------------------- draft vocabulary

def response_ids(cache: Any) -> torch.Tensor:
    """Every response token of the cache (the tokens its loss positions predict), concatenated."""
    parts = [cache.tokens[int(cache.offsets[e]) + int(cache.starts[e]) + 1:int(cache.offsets[e + 1])]
             for e in range(len(cache))]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


def draft_vocabulary(cache: Any, vocab_size: int, size: int | None) -> torch.Tensor:
    """Sorted target ids [N] of the draft vocabulary: the `size` most frequent response tokens of
    the cache (ties: more frequent over all tokens first, then lower id); beyond the tokens the
    responses contain, the most frequent prompt tokens, then the lowest unused ids. `size` None:
    min(32000, vocab_size, distinct response tokens)."""
    resp = torch.bincount(response_ids(cache), minlength=vocab_size)[:vocab_size]
    every = torch.bincount(cache.tokens, minlength=vocab_size)[:vocab_size]
    n = min(DEFAULT_DRAFT_VOCAB, vocab_size, max(1, int((resp > 0).sum()))) if size is None else size
    if n > vocab_size:
        raise UsageError(f"--draft-vocab {n} exceeds the target's vocabulary ({vocab_size})")
    key = (resp * (int(every.max()) + 1) + every).double() - torch.arange(vocab_size).double() / (2 * vocab_size)
    return key.topk(n).indices.sort().values


def vocab_maps(ids: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t [N] int64 offsets: target = draft + d2t[draft], t2d [V] bool) of sorted ids, EAGLE-3's layout."""
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(ids.shape[0]), t2d


# ----------------------------------------------------------------------------- head

def build_eagle3(target: Any, layers: tuple[int, ...], ids: torch.Tensor, seed: int):
    """A new Eagle3Head for `target` reading `layers`, draft vocabulary `ids`. Its `lm_head` starts
    as the target LM head's rows `ids` and its `norm` as the target's final norm (warm start; the
    head's h equals the target's)."""
    from specbench_cli.methods.heads.eagle3.model import Eagle3Head
    from specbench_cli.methods.heads.model import eagle_config

    cfg = eagle_config(target.config, 1)
    del cfg.bias
    cfg.draft_vocab_size = int(ids.shape[0])
    cfg.feature_layers = [int(i) for i in layers]
    cfg.architectures = ["LlamaForCausalLMEagle3"]
    torch.manual_seed(seed)
    head = Eagle3Head(cfg).bind(target)
    d2t, t2d = vocab_maps(ids, int(target.config.vocab_size))
    with torch.no_grad():
        head.d2t.copy_(d2t)
        head.t2d.copy_(t2d)
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[ids].float())
        norm = getattr(target.get_decoder(), "norm", None)
        if norm is not None and getattr(norm, "weight", None) is not None and norm.weight.shape == head.norm.weight.shape:
            head.norm.weight.copy_(norm.weight.float())
    return head


# ----------------------------------------------------------------------------- training-time test

def shift(x: torch.Tensor, k: int) -> torch.Tensor:
    """x[:, k:] padded at the end with zeros to x's length ([B, T, ...])."""
    if k == 0:
        return x
    pad = torch.zeros_like(x[:, :k])
    return torch.cat([x[:, k:], pad], dim=1) if k < x.shape[1] else torch.zeros_like(x)


def ttt_unroll(head, layers: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The head unrolled `steps` steps over whole sequences (see the module docstring).

    layers [B,T,3h_t] target features, tokens [B,T] (token t at position t), valid [B,T] bool.
    Returns the head's outputs [B,T,h] of each step (pre-norm: what the next step reads)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from specbench_cli.methods.heads.model import causal_mask

    mid, w = head.midlayer, head.fc.weight
    attn = mid.self_attn
    b, t = tokens.shape
    positions = torch.arange(t, device=tokens.device).expand(b, -1)
    allowed = causal_mask(valid)  # [B,1,T,T]: step-0 keys, causal over real tokens
    x = head.fc(layers.to(w.dtype))
    keys, values, outs = [], [], []
    for k in range(steps):
        emb = head.embed(shift(tokens, 1 + k)).to(w.dtype)
        normed = mid.hidden_norm(x)
        residual = normed if mid.norm_before_residual else x
        both = torch.cat([mid.input_layernorm(emb), normed], dim=-1)
        shape = (b, t, -1, attn.head_dim)
        q = attn.q_proj(both).view(shape).transpose(1, 2)
        kk = attn.k_proj(both).view(shape).transpose(1, 2)
        vv = attn.v_proj(both).view(shape).transpose(1, 2)
        cos, sin = head.rotary(x, positions + k)
        q, kk = apply_rotary_pos_emb(q, kk, cos, sin)
        g = attn.num_key_value_groups
        keys.append(kk.repeat_interleave(g, dim=1))
        values.append(vv.repeat_interleave(g, dim=1))
        scores = [(q @ keys[0].transpose(-1, -2)) * attn.scaling]  # [B,H,T,T]
        scores[0] = scores[0].masked_fill(~allowed, float("-inf"))
        scores += [((q * kj).sum(-1) * attn.scaling)[..., None] for kj in keys[1:]]  # [B,H,T,1] each
        probs = torch.softmax(torch.cat(scores, dim=-1).float(), dim=-1).to(q.dtype)
        out = probs[..., :t] @ values[0]
        for j in range(1, k + 1):
            out = out + probs[..., t + j - 1:t + j] * values[j]
        x = residual + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
        x = x + mid.mlp(mid.post_attention_layernorm(x))
        outs.append(x)
    return outs


# ----------------------------------------------------------------------------- trainer hooks

def build(recipe: Any, target: Any, cache: Any, resume_from: Path | None, vocab_file: Path | None):
    """(head, draft-vocabulary rows of the target LM head [N, h], no separate vocabulary file: the
    head holds its own, summary fields) of an EAGLE-3 run."""
    layers = feature_layers_for(int(target.config.num_hidden_layers), recipe.feature_layers)
    check_cache(cache, "given to the trainer", layers)
    vocab_size = int(target.config.vocab_size)
    ids = draft_vocabulary(cache, vocab_size, recipe.draft_vocab)
    if resume_from is not None:
        saved = read_json(resume_from / "config.json", "checkpoint config")
        saved = saved.get("draft_vocab_size") if isinstance(saved, dict) else None
        if saved != int(ids.shape[0]):
            raise UsageError(f"--resume: checkpoint {resume_from.name} has a draft vocabulary of {saved} tokens, "
                             f"this run {ids.shape[0]}: give the same --draft-vocab")
    head = build_eagle3(target, layers, ids, recipe.seed)
    resp = response_ids(cache)
    extra = {"draft_vocab": int(ids.shape[0]), "feature_layers": list(layers),
             "draft_vocab_coverage": round(float(head.t2d[resp].float().mean()) if resp.numel() else 0.0, 4),
             "ttt_steps": recipe.ttt_steps}
    return head, target.get_output_embeddings().weight[ids].float(), None, extra


def checks(recipe: Any) -> list[tuple[bool, str]]:
    """(ok, message) of the recipe options that apply to an EAGLE-3 run."""
    return [(recipe.layers == 1, "--kind eagle3: the EAGLE-3 head has one layer (--layers 1)"),
            (not recipe.adversarial, "--adversarial applies to medusa, eagle and hydra heads, not eagle3"),
            (recipe.sub_vocab, "--full-vocab does not apply to eagle3 (its vocabulary is --draft-vocab)")]
