"""The learning-rate schedule and the mixed-precision context every trainer uses."""

from __future__ import annotations

import contextlib
import math
from typing import Any


def lr_factor(step: int, warmup: int, steps: int) -> float:
    """Multiplier of the base learning rate at `step` (0-based): linear warmup over `warmup`
    steps, then cosine decay to 10 % at `steps`."""
    if step < warmup:
        return (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def autocast(bfloat16: bool, device: Any = "cpu") -> Any:
    """bfloat16 autocast on `device`'s type when asked (weights and optimizer state stay
    float32; softmax and losses run in float32 by autocast's rules), else a no-op context."""
    if not bfloat16:
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
