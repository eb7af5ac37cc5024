"""EAGLE-3's draft head (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large
Language Models via Training-Time Test"), in SafeAILab's checkpoint layout.

Inputs at position t: the target's hidden states at the *inputs* of three layers (by default 2,
L//2 and L-3 of an L-layer target), concatenated low to high ([3 h_t]), and token t+1.
`fc` ([3 h_t] -> h, no bias) turns the features into the head's stream x; later draft steps feed
the head's own output back (already h wide, so `fc` is skipped). One decoder layer (`midlayer`)
whose attention reads `cat(input_layernorm(embed(token)), hidden_norm(x))` ([2h], so q/k/v are
2h wide) with x as the residual, then a Llama MLP block; `norm` and the head's own `lm_head` give
logits over a draft vocabulary of `draft_vocab_size` tokens, mapped to target ids by
`target = draft + d2t[draft]` (`t2d` marks the target ids in the draft vocabulary).

Keys (`model.safetensors`): `fc.weight`, `midlayer.{hidden_norm,input_layernorm,
post_attention_layernorm}.weight`, `midlayer.self_attn.{q,k,v,o}_proj.weight`,
`midlayer.mlp.{gate,up,down}_proj.weight`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`. The
token embedding is the target's (frozen, not stored). `config.json`: a LlamaConfig with
`num_hidden_layers: 1`, `draft_vocab_size`, optional `target_hidden_size`, and our optional
`feature_layers` (the three layer indices; default EAGLE-3's rule).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.kv import CachedHeadMixin


def default_feature_layers(n_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's rule: the inputs of layers 2, L//2 and L-3 (in that order, low to high)."""
    if n_layers < 6:
        raise UsageError(f"EAGLE-3 reads the inputs of layers 2, L//2 and L-3: the target has only {n_layers} "
                         f"layers (give the head config 'feature_layers')")
    return 2, n_layers // 2, n_layers - 3


class _RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)


class _MidLayer(nn.Module):
    """The one decoder layer: attention over [emb; hidden] (2h), residual on the hidden stream."""

    def __init__(self, config: Any, norm_before_residual: bool = False) -> None:
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP

        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.hidden_norm = _RMSNorm(h, eps)
        self.input_layernorm = _RMSNorm(h, eps)
        self.post_attention_layernorm = _RMSNorm(h, eps)
        self.self_attn = LlamaAttention(config, 0)
        a = self.self_attn
        # q/k/v read the concatenation (2h); o writes h
        a.q_proj = nn.Linear(2 * h, a.q_proj.out_features, bias=False)
        a.k_proj = nn.Linear(2 * h, a.k_proj.out_features, bias=False)
        a.v_proj = nn.Linear(2 * h, a.v_proj.out_features, bias=False)
        self.mlp = LlamaMLP(config)
        self.norm_before_residual = norm_before_residual

    def forward(self, emb, x, position_embeddings, mask, cache):
        normed = self.hidden_norm(x)
        residual = normed if self.norm_before_residual else x
        both = torch.cat([self.input_layernorm(emb), normed], dim=-1)  # EAGLE-3's order: (emb, hidden)
        attn = self.self_attn(both, position_embeddings=position_embeddings, attention_mask=mask,
                              past_key_values=cache)[0]
        x = residual + attn
        return x + self.mlp(self.post_attention_layernorm(x))


class Eagle3Head(CachedHeadMixin, nn.Module):
    """Same inference API as `EagleHead` (`new_cache`, `step`, `to_target`, `draft_ids`), so the
    EAGLE-2 tree builders draft with it unchanged; `step` takes [n, 3 h_t] target features or
    [n, h] head outputs."""

    kind = "eagle3"

    def __init__(self, config: Any) -> None:
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        super().__init__()
        config._attn_implementation = "sdpa"
        self.config = config
        h = config.hidden_size
        self.target_hidden = int(getattr(config, "target_hidden_size", None) or h)
        self.fc = nn.Linear(3 * self.target_hidden, h, bias=False)
        self.midlayer = _MidLayer(config, bool(getattr(config, "norm_before_residual", False)))
        self.norm = _RMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))
        self.rotary = LlamaRotaryEmbedding(config)
        self.n_layers = 1
        layers = getattr(config, "feature_layers", None)
        self.feature_layers_given = tuple(int(i) for i in layers) if layers else None
        self.__dict__["embed"] = None

    # -- binding and vocabulary ---------------------------------------------------------------
    def bind(self, target: Any) -> "Eagle3Head":
        from specbench_cli.methods.heads.model import _target_parts

        self.__dict__["embed"] = _target_parts(target)[1]
        return self

    def feature_layers(self, n_layers: int) -> tuple[int, ...]:
        """The target layers whose inputs this head reads; UsageError if the target lacks one."""
        layers = self.feature_layers_given or default_feature_layers(n_layers)
        if len(layers) != 3 or any(not 0 <= i < n_layers for i in layers):
            raise UsageError(f"EAGLE-3 head reads layers {list(layers)}: the target has {n_layers} layers")
        return layers

    def use_vocab(self, ids) -> None:  # the draft vocabulary is the head's own
        return None

    @property
    def draft_ids(self) -> torch.Tensor:
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    def to_target(self, idx: torch.Tensor) -> torch.Tensor:
        idx = idx.to(self.d2t.device)
        return idx + self.d2t[idx]

    # -- forward -------------------------------------------------------------------------------
    def _run(self, features, tokens, positions, mask, cache=None) -> torch.Tensor:
        """features [B,T,3h_t] or [B,T,h], tokens [B,T], positions [B,T], mask [B,1,T,S] bool -> [B,T,h]."""
        w = self.fc.weight
        emb = self.embed(tokens).to(w.dtype)
        x = features.to(w.dtype)
        if x.shape[-1] == 3 * self.target_hidden:  # target features; the head's own outputs are h wide
            x = self.fc(x)
        return self.midlayer(emb, x, self.rotary(x, positions), mask, cache)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
        return self._run(features, tokens, positions, mask)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """[..., h] -> [..., draft_vocab_size] (map indices with `to_target`)."""
        return self.lm_head(self.norm(states.to(self.fc.weight.dtype)))

