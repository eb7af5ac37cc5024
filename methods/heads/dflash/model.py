"""DFlash's drafter (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative Decoding"),
in z-lab's checkpoint layout (`DFlashDraftModel`).

A few Qwen3-style decoder layers that draft a whole block in one forward: the block is the last
verified token followed by `block_size - 1` mask tokens (`mask_token_id`), embedded with the
target's own token embedding, and every position of the block attends to every other (no causal
mask inside the block). The context is injected as extra keys/values: the target's hidden states
after layers `target_layer_ids` (its `hidden_states[i + 1]`, concatenated low to high, [n h_t])
at every position before the block go through `fc` ([n h_t] -> h, no bias) and `hidden_norm`,
and each drafter layer projects that one context with its own `k_proj` / `v_proj` (`k_norm` and
RoPE at the context's positions); the block's own keys/values come from the layer's input as
usual. After `norm`, the target's LM head turns position j of the block (j >= 1) into the
distribution of the token j places after the last verified one.

Keys (`model.safetensors`): `fc.weight`, `hidden_norm.weight`, `norm.weight` and per layer
`layers.{i}.{input_layernorm,post_attention_layernorm}.weight`,
`layers.{i}.self_attn.{q,k,v,o}_proj.weight` (+ `.bias` with `attention_bias`),
`layers.{i}.self_attn.{q,k}_norm.weight`, `layers.{i}.mlp.{gate,up,down}_proj.weight`. The token
embedding and the LM head are the target's (not stored). `config.json`: a Qwen3-style config
(`hidden_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `head_dim`,
`intermediate_size`, `rms_norm_eps`, RoPE fields, `vocab_size`) with `dflash_config`:
`target_layer_ids`, `mask_token_id` and `block_size` (also read from the top level, default 16).

At inference the context keys/values of each layer are cached (`DFlashCache`): each step adds the
positions the target accepted since the last step, then drafts the block over the cache.
Training (methods/heads/dflash/training.py) runs many blocks of a sequence at once through
the same `block_states` with a mask that lets a block anchored at position a see the context
before a only: the computation inference makes for that block.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn
from torch.nn import functional as F

from specbench_cli.methods.heads.eagle3.model import _RMSNorm  # Qwen3's RMSNorm (float32 inside)

DEFAULT_BLOCK = 16


def dflash_field(cfg: dict, key: str, default: Any = None) -> Any:
    """A DFlash setting: `dflash_config`'s value, else the config's top-level one, else `default`."""
    inner = cfg.get("dflash_config")
    if isinstance(inner, dict) and key in inner:
        return inner[key]
    return cfg.get(key, default)


def default_target_layers(n_target: int, n_draft: int) -> tuple[int, ...]:
    """The target layers a new drafter reads: z-lab's rule (one layer: the middle one; else
    `n_draft` layers spread evenly from layer 1 to layer L-3), or, where the target is too shallow
    for it, `n_draft` layers spread evenly over all of them."""
    if n_draft == 1:
        return (n_target // 2,)
    start, end = 1, n_target - 3
    if end > start:
        ids = tuple(int(round(start + i * (end - start) / (n_draft - 1))) for i in range(n_draft))
    else:
        ids = tuple(int(round(i * (n_target - 1) / (n_draft - 1))) for i in range(n_draft))
    return tuple(min(max(i, 0), n_target - 1) for i in ids)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on [B, heads, T, d] with cos/sin [B, T, d] (rotate-half convention)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


class _Attention(nn.Module):
    def __init__(self, h: int, heads: int, kv_heads: int, head_dim: int, eps: float, bias: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(h, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(h, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(h, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, h, bias=bias)
        self.q_norm = _RMSNorm(head_dim, eps)
        self.k_norm = _RMSNorm(head_dim, eps)

    def keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T, h] -> keys, values [B, kv_heads, T, d] (keys normed and rotated)."""
        b, t, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return _rotate(k, cos, sin), v

    def forward(self, x, ctx_k, ctx_v, cos, sin, mask):
        b, t, _ = x.shape
        q = _rotate(self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2), cos, sin)
        k, v = self.keys_values(x, cos, sin)
        k, v = torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)
        groups = self.heads // self.kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(self.head_dim))
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class _Layer(nn.Module):
    def __init__(self, config: Any, eps: float, bias: bool) -> None:
        from transformers.models.llama.modeling_llama import LlamaMLP

        super().__init__()
        h = config.hidden_size
        self.input_layernorm = _RMSNorm(h, eps)
        self.self_attn = _Attention(h, config.num_attention_heads, config.num_key_value_heads, config.head_dim, eps,
                                    bias)
        self.post_attention_layernorm = _RMSNorm(h, eps)
        self.mlp = LlamaMLP(config)

    def forward(self, x, ctx_k, ctx_v, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), ctx_k, ctx_v, cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


ROPE_FIELDS = ("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings")


def llama_geometry(cfg: dict):
    """A LlamaConfig carrying the drafter's widths, MLP and RoPE (its layers are built from it)."""
    from transformers import LlamaConfig

    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    fields = {k: cfg[k] for k in ROPE_FIELDS if cfg.get(k) is not None}
    return LlamaConfig(hidden_size=h, intermediate_size=cfg["intermediate_size"], num_attention_heads=heads,
                       num_key_value_heads=cfg.get("num_key_value_heads") or heads,
                       head_dim=cfg.get("head_dim") or h // heads, rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                       hidden_act=cfg.get("hidden_act", "silu"), vocab_size=cfg["vocab_size"],
                       num_hidden_layers=cfg["num_hidden_layers"], mlp_bias=False, **fields)


class DFlashCache:
    """The context keys/values of every drafter layer ([1, kv_heads, S, d] each) for the
    positions 0..S-1 the target has accepted."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[Optional[torch.Tensor]] = [None] * n_layers
        self.values: list[Optional[torch.Tensor]] = [None] * n_layers
        self.length = 0

    def add(self, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for i, (k, v) in enumerate(kv):
            self.keys[i] = k if self.keys[i] is None else torch.cat([self.keys[i], k], dim=2)
            self.values[i] = v if self.values[i] is None else torch.cat([self.values[i], v], dim=2)
        self.length += int(kv[0][0].shape[2]) if kv else 0


class DFlashDrafter(nn.Module):
    kind = "dflash"

    def __init__(self, cfg: dict) -> None:
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        super().__init__()
        self.cfg = {k: v for k, v in cfg.items() if k != "specbench"}
        self.config = llama_geometry(cfg)
        h, eps = self.config.hidden_size, self.config.rms_norm_eps
        bias = bool(cfg.get("attention_bias", False))
        self.target_layer_ids = tuple(int(i) for i in dflash_field(cfg, "target_layer_ids"))
        self.block_size = int(dflash_field(cfg, "block_size", DEFAULT_BLOCK))
        self.mask_token_id = int(dflash_field(cfg, "mask_token_id"))
        self.embedding_scale = float(dflash_field(cfg, "input_embedding_scale", 1.0))
        self.target_hidden = int(cfg.get("target_hidden_size") or h)
        self.fc = nn.Linear(len(self.target_layer_ids) * self.target_hidden, h, bias=False)
        self.hidden_norm = _RMSNorm(h, eps)
        self.layers = nn.ModuleList([_Layer(self.config, eps, bias) for _ in range(self.config.num_hidden_layers)])
        self.norm = _RMSNorm(h, eps)
        self.rotary = LlamaRotaryEmbedding(self.config)
        self.n_layers = self.config.num_hidden_layers
        self.__dict__["embed"] = None
        self.__dict__["lm_head"] = None

    # -- binding ---------------------------------------------------------------------------------
    def bind(self, target: Any) -> "DFlashDrafter":
        """Reads the target's token embedding and LM head (kept out of the state dict)."""
        from specbench_cli.methods.heads.model import _target_parts

        head, embed = _target_parts(target)
        self.__dict__["lm_head"], self.__dict__["embed"] = head, embed
        return self

    def config_dict(self) -> dict:
        return dict(self.cfg)

    def feature_layers(self) -> tuple[int, ...]:
        """The target's `hidden_states` indices it reads (the outputs of `target_layer_ids`)."""
        return tuple(i + 1 for i in self.target_layer_ids)

    # the sampled draft token (methods/heads/common.py `pick`): logits are over the whole vocabulary
    draft_ids = None

    def to_target(self, idx: torch.Tensor) -> torch.Tensor:
        return idx

    # -- forward ---------------------------------------------------------------------------------
    def context(self, features: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Target features [B, S, n h_t] at positions [B, S] -> each layer's context keys/values."""
        w = self.fc.weight
        c = self.hidden_norm(self.fc(features.to(w.dtype)))
        cos, sin = self.rotary(c, positions)
        return [layer.self_attn.keys_values(c, cos, sin) for layer in self.layers]

    def block_states(self, kv: list[tuple[torch.Tensor, torch.Tensor]], tokens: torch.Tensor,
                     positions: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Blocks of tokens [B, Q] at positions [B, Q] over context keys/values `kv` (S positions)
        -> final states [B, Q, h]. `mask` [B, 1, Q, S + Q] bool (True: may attend); None: every
        query sees every key (one block at inference)."""
        w = self.fc.weight
        x = self.embed(tokens).to(w.dtype)
        if self.embedding_scale != 1.0:
            x = x * self.embedding_scale
        cos, sin = self.rotary(x, positions)
        for layer, (k, v) in zip(self.layers, kv):
            x = layer(x, k, v, cos, sin, mask)
        return self.norm(x)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.lm_head(states.to(self.lm_head.weight.dtype))

    # -- inference -------------------------------------------------------------------------------
    def new_cache(self) -> DFlashCache:
        return DFlashCache(self.n_layers)

    def absorb(self, cache: DFlashCache, features: torch.Tensor) -> None:
        """Add the features [k, n h_t] of the next k positions to the cache."""
        if features.shape[0] == 0:
            return
        base = cache.length
        pos = torch.arange(base, base + features.shape[0], device=features.device)[None]
        cache.add(self.context(features[None], pos))

    def draft_logits(self, cache: DFlashCache, root: int) -> torch.Tensor:
        """Logits [block_size - 1, V] of the block [root, mask, ...] placed right after the cache."""
        device = self.fc.weight.device
        tokens = torch.full((1, self.block_size), self.mask_token_id, dtype=torch.long, device=device)
        tokens[0, 0] = root
        pos = torch.arange(cache.length, cache.length + self.block_size, device=device)[None]
        kv = list(zip(cache.keys, cache.values))
        return self.logits(self.block_states(kv, tokens, pos)[0, 1:])
