"""The lean forward's kernel plan for this machine: measured once, cached, reused.

`--kernels auto` (the default) times every candidate matrix-product kernel on the model's own
weights (engine/forward/kernels.py) the first time a model, dtype and thread count meet this
CPU, and caches the choice under `<cache>/kernels/`, keyed by everything that changes it: the
CPU model and instruction-set flags, torch version, dtype, threads and the weight shapes. A
fixed name (`--kernels mkl`, ...) skips the measurement and uses that kernel everywhere.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Optional

from specbench_cli.atomic import atomic_write
from specbench_cli.engine.forward.cpuinfo import cpu_flags, cpu_model
from specbench_cli.errors import UsageError

PLAN_VERSION = 3  # bumped when the candidate kernels change: older cached plans are timed again


def plan_key(groups: dict[str, list[Any]], dtype: str, threads: int) -> dict[str, Any]:
    import torch

    return {"version": PLAN_VERSION, "cpu": cpu_model(), "flags": cpu_flags(), "torch": torch.__version__,
            "dtype": dtype, "threads": threads, "shapes": {s: len(ws) for s, ws in sorted(groups.items())}}


def plan_path(key: dict[str, Any]) -> Path:
    from specbench_cli.models.cache import cache_root

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"{digest}.json"


def load_cached(key: dict[str, Any]):
    from specbench_cli.engine.forward.kernels import Plan

    try:
        plan = Plan.from_dict(json.loads(plan_path(key).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return plan if plan.key == key else None


def save_cached(plan) -> Path:
    path = plan_path(plan.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, json.dumps(plan.to_dict(), indent=1))


def plan_for(model: Any, kernels: str, dtype: str, refresh: bool = False,
             note: Optional[Callable[[str], None]] = None):
    """The kernel plan for `model` (already in its dtype, on the CPU) under `--kernels kernels`."""
    import torch

    from specbench_cli.engine.forward import kernels as k
    from specbench_cli.engine.forward.lean import weight_groups

    groups = weight_groups(model)
    tdtype = next(iter(groups.values()))[0].dtype
    if kernels != "auto":
        if kernels not in k.available(tdtype):
            raise UsageError(f"--kernels {kernels}: not available for {dtype} in this torch build "
                             f"(available: {', '.join(k.available(tdtype))})")
        return k.Plan(fixed=kernels)
    key = plan_key(groups, dtype, torch.get_num_threads())
    plan = None if refresh else load_cached(key)
    if plan is None:
        if note:
            note("timing the matrix-product kernels on this CPU once (cached for this model, dtype and threads)")
        plan = k.calibrate(groups)
        cfg = model.config
        heads = cfg.num_attention_heads
        plan.attention, plan.attention_timings = k.calibrate_attention(
            heads, getattr(cfg, "num_key_value_heads", None) or heads,
            getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, cfg.num_hidden_layers, tdtype)
        plan.key = key
        try:
            save_cached(plan)
        except OSError:
            pass  # a read-only cache: use the plan, measure again next time
    return plan
