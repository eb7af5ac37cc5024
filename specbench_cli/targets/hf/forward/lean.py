"""`--forward lean`: the same Llama decoder in far fewer tensor ops.

A q=1 forward of SmolLM2-135M through transformers' modules issues ~6,000 aten calls (about
200 per layer: views, casts, rotate_half's slices and cat, mask building, decorators) around
211 small matmuls; on a CPU most of a small model's forward is that per-op overhead, not
arithmetic (docs/performance.md). This path computes the same function per layer with
about 30 calls:

    x = rms_norm(h) ; qkv = x @ [Wq;Wk;Wv]^T ; rope(q, k) in one pass ; cache write ;
    short attention (targets/hf/forward/short.py) ; h += attn @ Wo^T ;
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

from specbench_cli.targets.hf.forward import kernels
from specbench_cli.targets.hf.forward.short import long_attention, short_attention


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


def weight_groups(model: Any) -> dict[str, list[torch.Tensor]]:
    """The matrices the lean forward multiplies, by shape `"OUTxIN"` (fused q/k/v and gate/up as
    the forward uses them, then o, down and the output head), for `kernels.calibrate`."""
    groups: dict[str, list[torch.Tensor]] = {}
    for w in _matrices(model):
        groups.setdefault(kernels.shape_key(w), []).append(w)
    return groups


def _matrices(model: Any) -> list[torch.Tensor]:
    body = model.model
    out = []
    for layer in body.layers:
        a, m = layer.self_attn, layer.mlp
        qkv = getattr(layer, "_qkv", None)
        gate_up = getattr(layer, "_gate_up", None)
        out += [qkv if qkv is not None else torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach(),
                a.o_proj.weight.detach(),
                gate_up if gate_up is not None else torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach(),
                m.down_proj.weight.detach()]
    out.append(model.lm_head.weight.detach())
    return out


def _fuse(modules: list[torch.nn.Linear]) -> torch.Tensor:
    """One `[sum out_i, in]` weight for the modules' `[out_i, in]` weights; each module's weight
    becomes a view of it, so nothing is stored twice."""
    weights = [m.weight.detach() for m in modules]
    fused = torch.cat(weights).contiguous()
    start = 0
    for m, w in zip(modules, weights):
        m.weight = torch.nn.Parameter(fused[start:start + w.shape[0]], requires_grad=False)
        start += w.shape[0]
    return fused


def install(model: Any, plan: Optional["kernels.Plan"] = None) -> int:
    """Give `model` (a LlamaForCausalLM) the lean decoder forward, its matrix products through
    `plan`'s kernels (None: `mkl`, i.e. `F.linear`, everywhere). Idempotent for the forward;
    a second call with a plan re-plans the products. Returns the bytes of extra weight forms
    the plan holds (packed or transposed copies; docs/performance.md)."""
    body = model.model
    if not getattr(body, "_specbench_lean", False):
        for layer in body.layers:
            a, m = layer.self_attn, layer.mlp
            layer._qkv = _fuse([a.q_proj, a.k_proj, a.v_proj])
            layer._gate_up = _fuse([m.gate_proj, m.up_proj])
        body.forward = MethodType(lean_decoder_forward, body)
        body._specbench_lean = True
    plan = plan or kernels.Plan(fixed="mkl")
    extra = 0
    for layer in body.layers:
        lin = {}
        for name, w in (("qkv", layer._qkv), ("o", layer.self_attn.o_proj.weight.detach()),
                        ("gate_up", layer._gate_up), ("down", layer.mlp.down_proj.weight.detach())):
            lin[name] = kernels.PlannedLinear(w, plan.kernels_for(kernels.shape_key(w)))
            extra += lin[name].extra_bytes
        layer._lin = lin
    head_w = model.lm_head.weight.detach()
    head = kernels.PlannedLinear(head_w, plan.kernels_for(kernels.shape_key(head_w)))
    extra += head.extra_bytes
    model.lm_head.forward = head
    body._specbench_kernels = plan
    body._specbench_attention = [name == "short" for name in plan.attention_by_q()]
    return extra


def attach_native(model: Any, native: Any) -> Any:
    """Hand the lean forward's short blocks and the output head to `native` (a
    targets/hf/forward/native/model.py `NativeForward` made for this model); returns it."""
    model.model._specbench_native = native
    model.lm_head.forward = native.head
    return native


def installed_plan(model: Any) -> Optional["kernels.Plan"]:
    """The kernel plan `install` put on `model` (None when the lean forward is not installed)."""
    body = getattr(model, "model", None)
    return getattr(body, "_specbench_kernels", None)


def _rope_tables(body: Any, h: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`[1, T, 1, d]` cos and signed sin such that rope(x) = x*cos + x.roll(d/2)*sin
    (transformers' rotate_half(x) = cat(-x2, x1) = roll(x, d/2) with the first half negated)."""
    cos, sin = body.rotary_emb(h, position_ids=position_ids)  # [1, T, d] each, the model's own rope variant
    half = sin.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos[:, :, None], signed[:, :, None]


def _layer(layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: Optional[torch.Tensor],
           cache: Any, heads: int, kv_heads: int, head_dim: int, eps: float, short: bool) -> torch.Tensor:
    """One decoder layer: `h` `[B, T, hidden]` -> `[B, T, hidden]`; writes this layer's keys/values to `cache`."""
    a = layer.self_attn
    b, t, hidden = h.shape
    x = F.rms_norm(h, (hidden,), layer.input_layernorm.weight, eps)
    lin = layer._lin
    qkv = _rows(lin["qkv"], x).view(b, t, heads + 2 * kv_heads, head_dim)
    qk = qkv[:, :, :heads + kv_heads]
    qk = qk * cos + qk.roll(head_dim // 2, dims=-1) * sin  # rope on queries and keys at once
    q = qk[:, :, :heads].transpose(1, 2)
    k = qk[:, :, heads:].transpose(1, 2)
    v = qkv[:, :, heads + kv_heads:].transpose(1, 2)
    if cache is not None:
        k, v = cache.update(k, v, a.layer_idx)
    if short:
        out, _ = short_attention(a, q, k, v, mask, scaling=a.scaling, force=True)  # [B, T, heads, head_dim]
    else:
        out = long_attention(q, k, v, mask, a.scaling)
    h = h + _rows(lin["o"], out.reshape(b, t, heads * head_dim))
    x = F.rms_norm(h, (hidden,), layer.post_attention_layernorm.weight, eps)
    gate, up = _rows(lin["gate_up"], x).chunk(2, dim=-1)
    return h + _rows(lin["down"], F.silu(gate) * up)


def _rows(linear: Any, x: torch.Tensor) -> torch.Tensor:
    """`linear` over `x` `[b, t, in]` as one block of b*t rows: the kernel plan is chosen by the
    rows a product multiplies, which for a batch is every sequence's rows together."""
    if x.shape[0] == 1:
        return linear(x)
    return linear(x.reshape(1, -1, x.shape[-1])).view(*x.shape[:-1], -1)


def lean_decoder_forward(self: Any, input_ids: Optional[torch.Tensor] = None,
                         attention_mask: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                         past_key_values: Any = None, inputs_embeds: Optional[torch.Tensor] = None,
                         use_cache: Optional[bool] = None, **kwargs: Any):
    """Drop-in for `LlamaModel.forward`: `last_hidden_state` `[B, T, hidden]` after the final norm.

    attention_mask: None (causal), or the engine's additive `[B, 1, T, past + T]` tree mask;
    a 2-D padding mask is accepted only when it hides nothing. A batch of several sequences
    (targets/hf/target.py) comes with that 4-D mask and its `[B, T]` position ids: each sequence's
    own cached slots, tree and positions.
    """
    from transformers.modeling_outputs import BaseModelOutputWithPast

    if kwargs.get("output_attentions"):
        raise ValueError("the lean forward returns no attention weights (use --forward sdpa)")
    keep_all = bool(kwargs.get("output_hidden_states"))  # as transformers: the input of every layer, then the last
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("give exactly one of input_ids or inputs_embeds")
    h = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
    if h.shape[0] != 1 and (attention_mask is None or attention_mask.dim() != 4 or position_ids is None):
        raise ValueError("the lean forward runs a batch of several sequences only with a 4-D mask and position ids")
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
    t = h.shape[1]
    native = getattr(self, "_specbench_native", None)
    if native is not None and not keep_all and native.usable(cache, h.shape[0], t):
        h = native.body(h, cos[:, :, 0], sin[:, :, 0], attention_mask, cache)
        return BaseModelOutputWithPast(last_hidden_state=h, past_key_values=cache)
    by_q = self._specbench_attention
    short = by_q[t] if t < len(by_q) else by_q[0]  # the plan's attention for this block size
    if not short and attention_mask is None and t > 1 and past > 0:
        # causal block after a cache: one bool mask for every layer (SDPA's is_causal aligns top-left)
        attention_mask = torch.ones((t, past + t), dtype=torch.bool, device=h.device).tril_(past)
    states = []
    for layer in self.layers[: cfg.num_hidden_layers]:
        if keep_all:
            states.append(h)
        h = _layer(layer, h, cos, sin, attention_mask, cache, heads, kv_heads, head_dim, eps, short)
    h = F.rms_norm(h, (h.shape[-1],), self.norm.weight, eps)
    return BaseModelOutputWithPast(last_hidden_state=h, past_key_values=cache,
                                   hidden_states=tuple(states) + (h,) if keep_all else None)
