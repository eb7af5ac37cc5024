"""The lean forward's kernel plan for this machine: measured once, cached, reused.

`--kernels auto` (the default) times every candidate matrix-product kernel on the model's own
weights (targets/hf/forward/kernels.py) the first time a model, dtype and thread count meet this
CPU, and caches the choice under `<cache>/kernels/`, keyed by everything that changes it: the
CPU model and instruction-set flags, torch version, dtype, threads and the weight shapes. A
fixed name (`--kernels mkl`, ...) skips the measurement and uses that kernel everywhere. The plans
are a keyed JSON cache (json_cache.py): validated on read, re-timed with one warning when
invalid, and a cache that cannot be written leaves the run going with the plan it timed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from specbench_cli.json_cache import KeyedJsonCache
from specbench_cli.targets.hf.forward.cpuinfo import cpu_flags, cpu_model

PLAN_VERSION = 3  # bumped when the candidate kernels change: older cached plans are timed again


def plan_key(groups: dict[str, list[Any]], dtype: str, threads: int) -> dict[str, Any]:
    import torch

    return {"version": PLAN_VERSION, "cpu": cpu_model(), "flags": cpu_flags(), "torch": torch.__version__,
            "dtype": dtype, "threads": threads, "shapes": {s: len(ws) for s, ws in sorted(groups.items())}}


def plan_from_document(doc: dict):
    """A cached plan, every field a later run uses checked (json_cache.py calls this on read): a
    timed plan names no `fixed` kernel, a kernel this torch build has for the key's dtype for
    every weight shape of the key and bucket, a whole `max_forms`, and numbers where the manifest
    records them. ValueError says what is wrong."""
    import torch

    from specbench_cli.targets.hf.forward.kernels import Plan, available

    if doc.get("fixed") is not None:
        raise ValueError("'fixed' is set, but a cached plan is a timed one")
    forms = doc.get("max_forms", 1)
    if isinstance(forms, bool) or not isinstance(forms, int) or not 1 <= forms <= 64:
        raise ValueError("'max_forms' must be an integer between 1 and 64")
    choices, shapes = doc.get("choices"), doc["key"].get("shapes")
    if not isinstance(choices, dict) or not isinstance(shapes, dict) or set(choices) != set(shapes):
        raise ValueError("'choices' must name the kernels of every weight shape of the key, and no other")
    dtype = getattr(torch, str(doc["key"].get("dtype")), None)
    usable = available(dtype) if isinstance(dtype, torch.dtype) else ()
    if any(not isinstance(ks, list) or not all(k in usable for k in ks) for ks in choices.values()):
        raise ValueError(f"'choices' names a kernel this torch build lacks (has {', '.join(usable)})")
    loadavg = doc.get("loadavg") or []
    if not isinstance(loadavg, list) or not all(_number(x) for x in loadavg):
        raise ValueError("'loadavg' must be a list of numbers")
    for name in ("timings", "attention_timings"):
        if doc.get(name) is not None and not isinstance(doc[name], dict):
            raise ValueError(f"'{name}' must be an object")
    if not isinstance(doc.get("measured_at", ""), str):
        raise ValueError("'measured_at' must be a string")
    return Plan.from_dict(doc)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


CACHE = KeyedJsonCache("kernels", "kernel plan", "timing the kernels again", plan_from_document,
                       lambda plan: plan.to_dict())


def plan_path(key: dict[str, Any], cache: Path) -> Path:
    return CACHE.path(key, cache)


def load_cached(key: dict[str, Any], cache: Path):
    """The cached plan for `key`, or None (missing, or invalid: then one warning line)."""
    return CACHE.load(key, cache)


def save_cached(plan, cache: Path) -> Optional[Path]:
    """Write the plan; None when the cache cannot be written (one warning: the plan is still used)."""
    return CACHE.save(plan, cache)


def plan_for(model: Any, kernels: str, dtype: str, cache: Path, refresh: bool = False,
             note: Optional[Callable[[str], None]] = None):
    """The kernel plan for `model` (already in its dtype, on the CPU) under `--kernels kernels`;
    `cache` is the tool's cache folder (plans live in its `kernels/`)."""
    import torch

    from specbench_cli.targets.hf.forward.lean import weight_groups
    from specbench_cli.targets.hf.load import fixed_plan, timed_plan

    groups = weight_groups(model)
    if kernels != "auto":
        return fixed_plan(groups, kernels, dtype)
    key = plan_key(groups, dtype, torch.get_num_threads())
    plan = None if refresh else load_cached(key, cache)
    if plan is None:
        if note:
            note("timing the matrix-product kernels on this CPU once (cached for this model, dtype and threads)")
        plan = timed_plan(model, groups)
        plan.key = key
        save_cached(plan, cache)  # a read-only cache: the plan is used, measured again next time
    return plan
