"""`--forward lean`: the same Llama decoder in far fewer tensor ops.

A q=1 forward of SmolLM2-135M through transformers' modules issues ~6,000 aten calls (about
200 per layer: views, casts, rotate_half's slices and cat, mask building, decorators) around
211 small matmuls; on a CPU most of a small model's forward is that per-op overhead, not
arithmetic (docs/performance.md). This path computes the same function per layer with
about 30 calls:

    x = rms_norm(h) ; qkv = x @ [Wq;Wk;Wv]^T ; rope(q, k) in one pass ; cache write ;
    short attention (engine/forward/short.py) ; h += attn @ Wo^T ;
    x = rms_norm(h) ; g, u = x @ [Wg;Wu]^T ; h += (silu(g) * u) @ Wd^T

The fused matrices are built once by `install` and the original q/k/v and gate/up weights
become views into them, so no weight is stored twice; in float32 every matrix is kept in
`[in, out]` memory order, which MKL multiplies by a vector faster on this CPU, and blocks of
several rows (and single rows when torch has 2+ threads) go through oneDNN, which multiplies
them up to 2x faster than MKL here (`_linear`). It replaces the forward of the
decoder body (`model.model`), so both `model(...)` and the hidden-state path go through it:
every method of a run, AR included, runs on exactly the same arithmetic. Only plain
Llama-architecture models (no biases, SiLU MLP, full attention) qualify; anything else is
refused rather than silently run on another path.
"""

from __future__ import annotations

from types import MethodType
from typing import Any, Optional

import torch
import torch.nn.functional as F

from specbench_cli.engine.forward.short import short_attention


def unsupported_reason(model: Any) -> Optional[str]:
    """Why `model` cannot take the lean forward, or None if it can."""
    if type(model).__name__ != "LlamaForCausalLM":
        return f"the lean forward supports Llama-architecture models only (this is {type(model).__name__})"
    return config_reason(model.config)


def config_reason(cfg: Any) -> Optional[str]:
    """Why a model with this (transformers) config cannot take the lean forward, or None."""
    if getattr(cfg, "model_type", None) != "llama":
        return f"the lean forward supports Llama-architecture models only (model_type {getattr(cfg, 'model_type', None)})"
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return "the lean forward supports models without attention/MLP biases"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"the lean forward supports SiLU MLPs only (this model uses {cfg.hidden_act})"
    return None


def _onednn_available() -> bool:
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


_ONEDNN = _onednn_available()


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`x @ w.T` for `x` `[1, T, in]`, `w` `[out, in]` (float32: an `[in, out]`-ordered view).

    float32 on a CPU: blocks of several rows go through oneDNN's matmul (2x faster than MKL
    here with `[in, out]` storage); a single row goes through oneDNN too when torch has more
    than one thread, because MKL's matrix-vector product runs on one thread only (quiet
    machine, 2 threads: q=1 lean forward 29.0 ms with MKL vs 22.2 ms with oneDNN), and through
    MKL with one thread, where MKL is slightly faster (29.3 vs 30.5 ms; docs/performance.md)."""
    if _ONEDNN and x.dtype == torch.float32 and x.device.type == "cpu" and (
            x.shape[-2] > 1 or torch.get_num_threads() > 1):
        return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
    return F.linear(x, w)


def _head_forward(self: Any, hidden: torch.Tensor) -> torch.Tensor:
    return _linear(hidden, self.weight)


def _fuse(modules: list[torch.nn.Linear], transposed: bool) -> torch.Tensor:
    """One `[sum out_i, in]` weight for the modules' `[out_i, in]` weights; each module's weight
    becomes a view of it, so nothing is stored twice.

    transposed: keep the fused matrix in `[in, out]` memory order (the returned tensor is then
    a transposed view). In float32 on this project's CPU, MKL's matrix-vector product reads a
    weight stored that way ~1.3x faster than the usual `[out, in]` (measured in
    docs/performance.md); in bfloat16 it is slower, so only float32 uses it."""
    weights = [m.weight.detach() for m in modules]
    if transposed:
        fused = torch.cat([w.t() for w in weights], dim=1).contiguous().t()
    else:
        fused = torch.cat(weights).contiguous()
    start = 0
    for m, w in zip(modules, weights):
        m.weight = torch.nn.Parameter(fused[start:start + w.shape[0]], requires_grad=False)
        start += w.shape[0]
    return fused


def install(model: Any) -> None:
    """Give `model` (a LlamaForCausalLM) the lean decoder forward. Idempotent.

    In float32 on a CPU the output head gets its own `[in, out]`-ordered copy (it stops sharing
    storage with a tied input embedding: +vocab x hidden floats, 113 MB for SmolLM2-135M)."""
    body = model.model
    if getattr(body, "_specbench_lean", False):
        return
    w = model.lm_head.weight
    transposed = w.dtype == torch.float32 and w.device.type == "cpu"
    for layer in body.layers:
        a, m = layer.self_attn, layer.mlp
        layer._qkv = _fuse([a.q_proj, a.k_proj, a.v_proj], transposed)
        layer._gate_up = _fuse([m.gate_proj, m.up_proj], transposed)
        _fuse([a.o_proj], transposed)
        _fuse([m.down_proj], transposed)
    if transposed:
        model.lm_head.weight = torch.nn.Parameter(w.detach().t().contiguous().t(), requires_grad=False)
    model.lm_head.forward = MethodType(_head_forward, model.lm_head)
    body.forward = MethodType(lean_decoder_forward, body)
    body._specbench_lean = True


def _rope_tables(body: Any, h: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`[1, T, 1, d]` cos and signed sin such that rope(x) = x*cos + x.roll(d/2)*sin
    (transformers' rotate_half(x) = cat(-x2, x1) = roll(x, d/2) with the first half negated)."""
    cos, sin = body.rotary_emb(h, position_ids=position_ids)  # [1, T, d] each, the model's own rope variant
    half = sin.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos[:, :, None], signed[:, :, None]


def _layer(layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: Optional[torch.Tensor],
           cache: Any, heads: int, kv_heads: int, head_dim: int, eps: float) -> torch.Tensor:
    """One decoder layer: `h` `[1, T, hidden]` -> `[1, T, hidden]`; writes this layer's keys/values to `cache`."""
    a = layer.self_attn
    b, t, hidden = h.shape
    x = F.rms_norm(h, (hidden,), layer.input_layernorm.weight, eps)
    qkv = _linear(x, layer._qkv).view(b, t, heads + 2 * kv_heads, head_dim)
    qk = qkv[:, :, :heads + kv_heads]
    qk = qk * cos + qk.roll(head_dim // 2, dims=-1) * sin  # rope on queries and keys at once
    q = qk[:, :, :heads].transpose(1, 2)
    k = qk[:, :, heads:].transpose(1, 2)
    v = qkv[:, :, heads + kv_heads:].transpose(1, 2)
    if cache is not None:
        k, v = cache.update(k, v, a.layer_idx)
    out, _ = short_attention(a, q, k, v, mask, scaling=a.scaling)  # [1, T, heads, head_dim]
    h = h + _linear(out.reshape(b, t, heads * head_dim), a.o_proj.weight)
    x = F.rms_norm(h, (hidden,), layer.post_attention_layernorm.weight, eps)
    gate, up = _linear(x, layer._gate_up).chunk(2, dim=-1)
    return h + _linear(F.silu(gate) * up, layer.mlp.down_proj.weight)


def lean_decoder_forward(self: Any, input_ids: Optional[torch.Tensor] = None,
                         attention_mask: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                         past_key_values: Any = None, inputs_embeds: Optional[torch.Tensor] = None,
                         use_cache: Optional[bool] = None, **kwargs: Any):
    """Drop-in for `LlamaModel.forward` (batch 1): `last_hidden_state` `[1, T, hidden]` after the final norm.

    attention_mask: None (causal), or the engine's additive `[1, 1, T, past + T]` tree mask;
    a 2-D padding mask is accepted only when it hides nothing (batch 1 has no padding).
    """
    from transformers.modeling_outputs import BaseModelOutputWithPast

    if kwargs.get("output_attentions"):
        raise ValueError("the lean forward returns no attention weights (use --forward sdpa)")
    keep_all = bool(kwargs.get("output_hidden_states"))  # as transformers: the input of every layer, then the last
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("give exactly one of input_ids or inputs_embeds")
    h = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
    if h.shape[0] != 1:
        raise ValueError("the lean forward runs batch size 1")
    if attention_mask is not None and attention_mask.dim() == 2:
        if not bool(attention_mask.all()):
            raise ValueError("the lean forward takes no padding mask")
        attention_mask = None
    if past_key_values is None:  # transformers >= 5.24 hands the cache over as `cache`
        past_key_values = kwargs.get("cache")
    cache = past_key_values if use_cache is not False else None
    past = cache.get_seq_length() if cache is not None else 0
    if position_ids is None:
        position_ids = torch.arange(past, past + h.shape[1], device=h.device)[None]
    cos, sin = _rope_tables(self, h, position_ids)
    cfg = self.config
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    eps = cfg.rms_norm_eps
    states = []
    for layer in self.layers[: cfg.num_hidden_layers]:
        if keep_all:
            states.append(h)
        h = _layer(layer, h, cos, sin, attention_mask, cache, heads, kv_heads, head_dim, eps)
    h = F.rms_norm(h, (h.shape[-1],), self.norm.weight, eps)
    return BaseModelOutputWithPast(last_hidden_state=h, past_key_values=cache,
                                   hidden_states=tuple(states) + (h,) if keep_all else None)
