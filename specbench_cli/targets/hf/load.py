"""How the `hf` target (targets/hf/target.py) loads: a transformers causal LM from a Hugging Face
folder or hub id, computing its forward as `--forward` says (targets/hf/forward/modes.py) and, under
`lean`, with the kernel plan its matrix products go through (targets/hf/forward/kernels.py).

The model loader (models/load.py) resolves the model reference first (an alias, a .gguf
converted once, a hub id looked up in the local cache when the hub is unreachable, a folder's
own Python code refused without `--trust-remote-code`) and hands `load` the folder it found, the
tokenizer's loading and the error messages naming the reference stay there; the kernel plan's
cache is its too (targets/hf/kernel_plan.py, passed here as `kernel_plan`). Without one, `load` uses a
fixed `--kernels` name as it is and times the kernels under `auto` every time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from specbench_cli.errors import UsageError, unknown

DTYPES = ("float32", "bfloat16", "float16")
# (model, `--kernels`, dtype name) -> the lean forward's kernel plan (targets/hf/forward/kernels.py `Plan`)
KernelPlanner = Callable[[Any, str, str], Any]


@dataclass
class LoadedHF:
    """What `load` made: the model in eval mode on its device, the forward it computes with
    (`auto` resolved), the lean forward's kernel record for the manifest (None on other forwards)
    and the parameter count (before the lean forward may give a tied output head its own copy)."""

    model: Any
    forward: str
    kernels: Optional[dict]
    params: int


def _native_dir(native_cache: Optional[Any]):
    from pathlib import Path

    from specbench_cli.locate import cache_root

    return Path(native_cache) if native_cache is not None else cache_root() / "native"


_said_native: set[str] = set()


def _native_lib(native_cache: Optional[Any], note: Optional[Callable[[str], None]], quiet: bool):
    """The native forward's library, or None; under `auto` the reason it is missing is said once
    per process (the lean forward runs instead, slower)."""
    from specbench_cli.targets.hf.forward import native

    lib, why = native.load(_native_dir(native_cache))
    if lib is None and not quiet and why not in _said_native:
        _said_native.add(why)
        message = f"the native forward is unavailable ({why}): the lean forward runs instead, slower"
        if note:
            note(message)
        else:
            import sys

            print(f"specbench: {message}", file=sys.stderr)
    return lib


def fixed_plan(groups: dict[str, list[Any]], kernels: str, dtype: str):
    """The plan of one fixed `--kernels` name for every weight shape (`groups`: shape -> weights);
    UsageError when this torch build lacks it for `dtype`."""
    from specbench_cli.targets.hf.forward import kernels as k

    tdtype = next(iter(groups.values()))[0].dtype
    if kernels not in k.available(tdtype):
        raise UsageError(f"--kernels {kernels}: not available for {dtype} in this torch build "
                         f"(available: {', '.join(k.available(tdtype))})")
    return k.Plan(fixed=kernels)


def timed_plan(model: Any, groups: dict[str, list[Any]]):
    """Every candidate matrix-product kernel timed on the model's own weights (`groups`: shape ->
    weights), and the few-row attention against SDPA for its head shapes: a fresh plan."""
    from specbench_cli.targets.hf.forward import kernels as k

    tdtype = next(iter(groups.values()))[0].dtype
    plan = k.calibrate(groups)
    cfg = model.config
    heads = cfg.num_attention_heads
    plan.attention, plan.attention_timings = k.calibrate_attention(
        heads, getattr(cfg, "num_key_value_heads", None) or heads,
        getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, cfg.num_hidden_layers, tdtype)
    return plan


def uncached_plan(model: Any, kernels: str, dtype: str):
    """The kernel plan without a cache: a fixed name as it is, `auto` timed now."""
    from specbench_cli.targets.hf.forward.lean import weight_groups

    groups = weight_groups(model)
    return fixed_plan(groups, kernels, dtype) if kernels != "auto" else timed_plan(model, groups)


def load(folder: str, *, device: str = "cpu", dtype: str = "float32", forward: str = "sdpa",
         kernels: str = "auto", trust_remote_code: bool = False, local_files_only: bool = False,
         kernel_plan: Optional[KernelPlanner] = None, native_cache: Optional[Any] = None,
         note: Optional[Callable[[str], None]] = None) -> LoadedHF:
    """The causal LM of `folder` (a Hugging Face folder or hub id) in eval mode on `device` with
    `dtype`, computing its forward as `forward` says (`sdpa`, `eager`, `short`, `lean` or `auto`:
    decided by the model's config alone, read once and handed to the model). Under `lean`,
    `kernels` picks the matrix-product kernels (`auto`: timed, through `kernel_plan` when given;
    or one fixed name). transformers' own errors (OSError, its ValueError refusing remote code)
    reach the caller as they are."""
    import torch
    from transformers import AutoModelForCausalLM

    from specbench_cli.targets.hf.forward import modes
    from specbench_cli.targets.hf.forward.short import register as register_short

    if dtype not in DTYPES:
        raise unknown("dtype", dtype, DTYPES)
    modes.check(forward)
    modes.check_kernels(kernels)
    kwargs = {"trust_remote_code": trust_remote_code, "local_files_only": local_files_only}
    config = None
    if forward == "auto":  # the config alone decides; it is read once and handed to the model below
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(folder, **kwargs)
        forward = modes.resolve(forward, config, device)
        if forward == "lean" and dtype == "float32" and str(device).startswith("cpu"):
            forward = "native" if _native_lib(native_cache, note, quiet=False) is not None else "lean"
    native_lib = None
    if forward == "native":
        native_lib = _native_lib(native_cache, note, quiet=True)
        if native_lib is None:
            from specbench_cli.errors import RuntimeFailure
            from specbench_cli.targets.hf.forward import native

            raise RuntimeFailure(f"--forward native: {native.load(_native_dir(native_cache))[1]}")
        if dtype != "float32":
            raise UsageError(f"--forward native computes in float32 only (this run: {dtype}); use --forward lean")
    attn_implementation = "short" if forward in ("lean", "native") else forward
    if attn_implementation == "short":
        register_short()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype),
                                                 attn_implementation=attn_implementation,
                                                 **({"config": config} if config is not None else {}), **kwargs)
    model.to(device)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    info = None
    if forward in ("lean", "native"):  # after counting: lean may give a tied output head its own copy
        from specbench_cli.targets.hf.forward import lean

        if reason := lean.unsupported_reason(model):
            raise UsageError(f"--forward {forward}: {reason}; use --forward sdpa or short")
        lean.install(model)
        # under native, the library kernels compute only the long blocks (prefills): a fixed kernel
        # there, no timing at load (`--kernels NAME` still picks it; `auto` means `mkl`)
        mode = "mkl" if forward == "native" and kernels == "auto" else kernels
        plan = (kernel_plan or uncached_plan)(model, mode, dtype)
        extra = lean.install(model, plan)
        info = {"mode": mode, "plan": plan.summary(), "extra_weight_bytes": extra}
        if mode == "auto":
            info.update(measured_at=plan.measured_at, loadavg=[round(x, 2) for x in plan.loadavg])
        if native_lib is not None:
            from specbench_cli.targets.hf.forward.native import isa_flags
            from specbench_cli.targets.hf.forward.native.model import NativeForward

            nf = lean.attach_native(model, NativeForward(model, native_lib))
            info["extra_weight_bytes"] = extra + nf.packed_bytes
            info["native"] = {"isa": isa_flags()[0], "max_q": nf.max_q}
    return LoadedHF(model, forward, info, params)
