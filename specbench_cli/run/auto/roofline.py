"""The physical floor of one forward on this machine: max(bytes read / bandwidth, flops / peak).

A q-token forward of a dense decoder must read every weight once (and the KV cache) and do
2 * q * (weights) multiply-adds plus attention. On a CPU both limits are measured here, in the
same process and with the same threads as the forward, so t(q) / floor(q) says how far the
kernels are from what the hardware allows (docs/performance.md):

- read bandwidth: the sum of a float32 buffer as large as the model's matrices (so caches help
  exactly as much as they help the forward), best of several passes; torch's sum, and when the
  model runs the native forward also the native library's streaming read (several concurrent
  prefetch streams per thread, as its products read the weights: one sequential stream per
  thread reads slower than that on a small VM), the faster of the two;
- matmul peak: a 2048 x 2048 x 2048 product in the run's dtype, best of several.

On a GPU the floor is not measured (the tool's own numbers there come from the GPU's kernels);
`measure` returns None.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Optional


@dataclass
class Roofline:
    bandwidth_gbs: float        # read bandwidth, GB/s
    peak_gflops: float          # matmul peak in the forward's dtype, GFLOP/s
    weight_bytes: int           # bytes of the matrices one forward reads (layers + output head)
    matmul_params: int          # their elements: a forward of q tokens does 2 * q * this FLOPs in them
    kv_bytes_per_token: int     # KV-cache bytes one cached token costs to read, all layers
    attn_flops_per_pair: int    # FLOPs per (query, key) pair, all layers (scores + weighted sum)
    context: int                # cached tokens the floor assumes (the curve's context)

    def floor_ms(self, q: int) -> float:
        """max(bytes / bandwidth, flops / peak) for one forward of q new tokens, in ms."""
        bytes_read = self.weight_bytes + self.kv_bytes_per_token * (self.context + q)
        flops = 2 * q * self.matmul_params + self.attn_flops_per_pair * q * (self.context + q)
        return 1000 * max(bytes_read / (self.bandwidth_gbs * 1e9), flops / (self.peak_gflops * 1e9))

    def bound(self, q: int) -> str:
        """'bandwidth' or 'compute': which limit sets floor(q)."""
        bytes_read = self.weight_bytes + self.kv_bytes_per_token * (self.context + q)
        flops = 2 * q * self.matmul_params + self.attn_flops_per_pair * q * (self.context + q)
        return "bandwidth" if bytes_read / self.bandwidth_gbs >= flops / self.peak_gflops else "compute"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Roofline":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def model_sizes(model: Any) -> dict[str, int]:
    """Bytes and elements of the matrices a forward reads, and the KV/attention sizes per token."""
    cfg = model.config
    matrices = [m.weight for m in model.modules()
                if type(m).__name__ == "Linear" and getattr(m, "weight", None) is not None]
    seen, params, nbytes = set(), 0, 0
    for w in matrices:
        if w.data_ptr() in seen:
            continue
        seen.add(w.data_ptr())
        params += w.numel()
        nbytes += w.numel() * w.element_size()
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    layers = cfg.num_hidden_layers
    elem = matrices[0].element_size() if matrices else 4
    return {"weight_bytes": nbytes, "matmul_params": params,
            "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * elem,
            "attn_flops_per_pair": 4 * layers * heads * head_dim}


def _best(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def read_bandwidth(nbytes: int, repeats: int = 5, native: Any = None) -> float:
    """GB/s of summing a float32 buffer of `nbytes` (at least 64 MB), best of `repeats`; with
    `native` (the native forward's library), the faster of torch's sum and its streaming read."""
    import torch

    n = max(nbytes, 64 << 20) // 4
    buf = torch.ones(n, dtype=torch.float32)
    with torch.inference_mode():
        t = _best(lambda: buf.sum(), repeats)
        if native is not None:
            t = min(t, _best(lambda: native.sb_read(buf.data_ptr(), n), repeats))
    return n * 4 / t / 1e9


def matmul_peak(dtype: Any, size: int = 2048, repeats: int = 3) -> float:
    """GFLOP/s of one size^3 matrix product in `dtype`, best of `repeats`."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(dtype)
    b = torch.randn(size, size, generator=gen).to(dtype)
    with torch.inference_mode():
        t = _best(lambda: a @ b, repeats)
    return 2 * size ** 3 / t / 1e9


def measure(model: Any, context: int) -> Optional[Roofline]:
    """This machine's floor for `model` (None off the CPU)."""
    param = next(model.parameters())
    if param.device.type != "cpu":
        return None
    sizes = model_sizes(model)
    native = getattr(getattr(getattr(model, "model", None), "_specbench_native", None), "lib", None)
    return Roofline(bandwidth_gbs=read_bandwidth(sizes["weight_bytes"], native=native),
                    peak_gflops=matmul_peak(param.dtype),
                    context=context, **sizes)
