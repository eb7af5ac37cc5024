"""How the target computes a forward, chosen once per run (`--forward`).

- `sdpa`: transformers' default, `torch.nn.functional.scaled_dot_product_attention`;
- `eager`: transformers' reference path (repeat_kv, matmul, softmax, matmul);
- `short`: this project's path (targets/hf/forward/short.py) for the few query rows a decode or verify step has (q <= 64),
  registered with transformers' attention interface. It scores the queries of each group of
  heads that share a key/value head against that head's keys in one matmul (no repeat_kv copy
  of the cache), applies the engine's additive tree mask or a causal mask for the last q
  columns, softmax in float32, and one more matmul. Longer inputs (the prompt's prefill) fall
  back to SDPA. Why it exists: on CPU, SDPA's flash kernel pays a fixed cost per call that
  dwarfs a q=1 attention over a few hundred cached tokens (measured in docs/performance.md);
- `lean`: `short` attention inside this project's fused Llama decoder (targets/hf/forward/lean.py);
- `native`: the lean forward whose blocks of up to 64 rows per sequence (every decode and verify
  step) run in one call of this project's C library (targets/hf/forward/native/), compiled at
  first use for the instruction set torch runs; float32; prefills stay on `lean`;
- `auto` (the `run`/`cost` default): for a plain Llama-architecture target on a CPU, `native` in
  float32 when the library builds (a C compiler is there; otherwise said once, and `lean`
  runs), `lean` in other dtypes; `sdpa` otherwise (GPUs, other architectures). The manifest
  records the resolved one (`model.forward`).

Every method of a run, AR included, goes through the same implementation, so speedups compare
like with like; the manifest records it (`config.forward`).
"""

from __future__ import annotations

from typing import Any

FORWARDS = ("auto", "sdpa", "eager", "short", "lean", "native")
# `--kernels`: how the lean forward multiplies (targets/hf/forward/kernels.py); `auto` times them on this CPU
KERNEL_CHOICES = ("auto", "mkl", "mkl-t", "mkl-wx", "onednn", "onednn-t", "onednn-packed", "mkl-packed")
DEFAULT_FORWARD = "auto"  # of `run` and `cost`; load_model itself defaults to sdpa (training needs it)


def check(name: str) -> str:
    """`name` if it is a known `--forward`, else a UsageError (before any model loads)."""
    if name not in FORWARDS:
        from specbench_cli.errors import unknown

        raise unknown("forward", name, FORWARDS)
    return name


def resolve(name: str, config: Any, device: str) -> str:
    """The forward `name` stands for with this model config on `device`: `auto` becomes `lean`
    for a plain Llama on a CPU and `sdpa` otherwise; any other name is itself."""
    if name != "auto":
        return name
    from specbench_cli.targets.hf.forward.lean import config_reason

    return "lean" if str(device).startswith("cpu") and config_reason(config) is None else "sdpa"


def check_kernels(name: str) -> str:
    """`name` if it is a known `--kernels`, else a UsageError (before any model loads)."""
    if name not in KERNEL_CHOICES:
        from specbench_cli.errors import unknown

        raise unknown("kernels", name, KERNEL_CHOICES)
    return name
