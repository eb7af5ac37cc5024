"""The native forward on a Llama model: its weights packed for `forward.c`, and the calls.

`NativeForward.attach(model, lib)` packs every layer's q/k/v, o, gate/up and down matrices and the
output head once (the packed copies are the only extra memory: one more copy of the weights), and
the lean decoder (targets/hf/forward/lean.py) hands it every forward of up to `max_q` new rows
per sequence whose cache it can use; longer blocks (a prompt's prefill) stay on the lean path's
library kernels. The output head goes through the native product for up to `max_q` rows too.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

import torch

NATIVE_MAX_Q = 64  # rows per sequence; longer blocks (prefills) take the library kernels


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


class NativeForward:
    """Packed weights and the library's model handle for one LlamaForCausalLM (float32, CPU)."""

    def __init__(self, model: Any, lib: ctypes.CDLL, max_q: int = NATIVE_MAX_Q) -> None:
        self.lib = lib
        self.max_q = max_q
        cfg = model.config
        body = model.model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.hidden = cfg.hidden_size
        self.inter = cfg.intermediate_size
        self.layers = cfg.num_hidden_layers
        self._keep: list[torch.Tensor] = []  # every tensor the library points into
        ptrs = []
        with torch.inference_mode():
            for layer in body.layers[: self.layers]:
                a, m = layer.self_attn, layer.mlp
                qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach()
                gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach()
                packed = [self._pack(w) for w in (qkv, a.o_proj.weight.detach(), gate_up, m.down_proj.weight.detach())]
                norms = [layer.input_layernorm.weight.detach().contiguous(),
                         layer.post_attention_layernorm.weight.detach().contiguous()]
                self._keep += norms
                ptrs += [_ptr(t) for t in packed + norms]
            self.final_norm = body.norm.weight.detach().contiguous()
            self.head_w = model.lm_head.weight.detach()
            self.head_packed = self._pack(self.head_w)
        table = torch.tensor(ptrs, dtype=torch.int64)
        self._keep.append(table)
        scale = float(getattr(body.layers[0].self_attn, "scaling", self.head_dim ** -0.5))
        handle = lib.sb_model_new(self.layers, self.hidden, self.heads, self.kv_heads, self.head_dim, self.inter,
                                  float(cfg.rms_norm_eps), scale, _ptr(table), _ptr(self.final_norm))
        if not handle:
            raise MemoryError("the native forward could not allocate its model")
        self.handle = handle
        self.extra_bytes = sum(t.numel() * 4 for t in self._keep if t.dtype == torch.float32 and t.dim() == 1
                               and t.numel() > 1 << 16)

    def _pack(self, w: torch.Tensor) -> torch.Tensor:
        w = w.contiguous()
        out = torch.empty(int(self.lib.sb_packed_size(w.shape[0], w.shape[1])), dtype=torch.float32)
        self.lib.sb_pack(_ptr(w), w.shape[0], w.shape[1], _ptr(out))
        self._keep.append(out)
        return out

    @property
    def packed_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._keep if t.numel() > 1 << 16)

    def __del__(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            try:
                self.lib.sb_model_free(handle)
            except Exception:  # interpreter shutdown
                pass

    # -- the decoder body -----------------------------------------------------------------
    def usable(self, cache: Any, b: int, t: int) -> bool:
        """Whether this forward can run natively: few rows, and a cache of ours, every layer started."""
        if t > self.max_q or cache is None:
            return False
        layers = getattr(cache, "layers", None)
        if not layers or len(layers) < self.layers:
            return False
        # every layer is made alike by the cache (targets/hf/kv.py): the first and the last tell,
        # so this per-step check does not walk every layer
        for layer in (layers[0], layers[self.layers - 1]):
            if not getattr(layer, "is_initialized", False) or not hasattr(layer, "_reserve"):
                return False
            k = layer._k
            if k.dtype != torch.float32 or not k.is_contiguous() or k.device.type != "cpu":
                return False
            if getattr(layer, "rows", 1) != b:
                return False
        return True

    def body(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: Optional[torch.Tensor],
             cache: Any) -> torch.Tensor:
        """The decoder layers and final norm for `h` `[B, T, hidden]`; keys/values written to `cache`."""
        b, t, _ = h.shape
        layers = cache.layers[: self.layers]
        past = layers[0].length
        end = past + t
        for layer in layers:
            layer._reserve(end)
        caps = {layer._k.shape[2] for layer in layers}
        if len(caps) != 1:
            raise RuntimeError("the native forward needs every layer's cache at one capacity")
        kv = torch.tensor([p for layer in layers for p in (_ptr(layer._k), _ptr(layer._v))], dtype=torch.int64)
        work = h.to(torch.float32).contiguous().clone()
        out = torch.empty_like(work)
        cos = cos.expand(b, t, -1).contiguous() if cos.shape[0] != b else cos.contiguous()
        sin = sin.expand(b, t, -1).contiguous() if sin.shape[0] != b else sin.contiguous()
        mask_ptr, mask_len = None, 0
        if mask is not None:
            if mask.dtype == torch.bool:
                mask = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, float("-inf"))
            mask = mask.to(torch.float32)
            mask = mask.expand(b, 1, t, mask.shape[-1]).contiguous() if mask.dim() == 4 else \
                mask.reshape(1, 1, t, -1).expand(b, 1, t, -1).contiguous()
            mask_len = mask.shape[-1]
            if mask_len < end:
                raise RuntimeError(f"the attention mask covers {mask_len} slots, the cache {end}")
            mask_ptr = _ptr(mask)
        rc = self.lib.sb_forward(self.handle, b, t, _ptr(work), _ptr(cos), _ptr(sin), mask_ptr, mask_len, past,
                                 _ptr(kv), next(iter(caps)), _ptr(out))
        if rc != 0:
            raise MemoryError("the native forward could not allocate its scratch memory")
        for layer in layers:
            layer.set_length(end)
        return out

    # -- the output head ------------------------------------------------------------------
    def head(self, x: torch.Tensor) -> torch.Tensor:
        """`x @ W_head^T` for `x` `[..., hidden]`: natively for up to `max_q` rows (per call)."""
        rows = x.numel() // x.shape[-1]
        if rows > self.max_q or x.dtype != torch.float32 or x.device.type != "cpu":
            return torch.nn.functional.linear(x, self.head_w)
        flat = x.reshape(rows, x.shape[-1]).contiguous()
        y = torch.empty(rows, self.head_w.shape[0], dtype=torch.float32)
        self.lib.sb_linear(_ptr(flat), _ptr(self.head_packed), rows, flat.shape[1], self.head_w.shape[0], _ptr(y))
        return y.view(*x.shape[:-1], self.head_w.shape[0])


def install(model: Any, cache_dir: Optional[Any] = None) -> NativeForward:
    """Give `model` (a LlamaForCausalLM in float32 on the CPU, lean forward installed or not) the
    native forward; RuntimeError with the reason when the library cannot be had."""
    from pathlib import Path

    from specbench_cli.locate import cache_root
    from specbench_cli.targets.hf.forward import lean, native

    lib, why = native.load(Path(cache_dir) if cache_dir is not None else cache_root() / "native")
    if lib is None:
        raise RuntimeError(why)
    if not getattr(model.model, "_specbench_lean", False):
        lean.install(model)
    return lean.attach_native(model, NativeForward(model, lib))
