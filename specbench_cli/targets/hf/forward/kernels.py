"""The matrix-product kernels of the lean forward, chosen per weight shape and block size.

A small model's forward on a CPU is ~85 % matrix products (docs/performance.md), and which
library multiplies a block of q rows by a weight fastest depends on the CPU (AVX2, AVX-512,
AMX), the dtype, the thread count, the weight's shape and q itself: on one 2-core AVX-512 VM
MKL's matrix-vector product was 1.6x faster than oneDNN at q = 1 while oneDNN with weights
packed once into its blocked layout was 1.6x faster than MKL at q = 10; another VM had the
opposite order at q = 1. So nothing is assumed: `calibrate` times every candidate on the
model's own weights, per shape and per bucket of q, and the forward then calls the winner.

Candidates (each needs the weight in a *form*; `plain` is the model's own `[out, in]` tensor,
every other form is an extra copy made once at load):

| kernel          | form          | dtypes          | call                                             |
| --------------- | ------------- | --------------- | ------------------------------------------------ |
| `mkl`           | plain         | all             | `F.linear` (MKL's sgemm/sgemv in float32)        |
| `mkl-t`         | `[in, out]`   | float32         | `F.linear` on the transposed copy                |
| `mkl-wx`        | plain         | float32         | `(W @ x^T)^T`: the weight as the tall left operand (MKL's kernels for a wide M and a narrow N) |
| `onednn`        | plain         | all             | oneDNN matmul on the plain weight                |
| `onednn-t`      | `[in, out]`   | float32         | oneDNN matmul on the transposed copy             |
| `onednn-packed` | oneDNN blocks | all             | oneDNN matmul, weight reordered once (inductor's freezing does the same) |
| `mkl-packed`    | MKL packed@M  | float32         | MKL's packed sgemm; rows padded up to the bucket's M (one copy per M) |

Buckets of q: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-128 and > 128 (prefill). Each bucket's
choice is the kernel with the least mean time at the bucket's two ends. The number of extra
forms a weight may hold is capped (`max_forms`, default 2): past the cap the form whose loss
costs least is dropped and its buckets take their best remaining kernel.

Losslessness is untouched: kernels differ only in the rounding of the last bits, and AR and
every method of a run call the same plan, so they compute the same function.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

BUCKETS: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128))
PREFILL_M = 256  # where the > 128 bucket is measured
ATTENTION = ("short", "sdpa")
KERNELS = ("mkl", "mkl-t", "mkl-wx", "onednn", "onednn-t", "onednn-packed", "mkl-packed")
DEFAULT_MAX_FORMS = 2


def _has(ns: Any, name: str) -> bool:
    try:
        return hasattr(ns, name)
    except (AttributeError, RuntimeError):
        return False


def _onednn() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available()) and _has(torch.ops.mkldnn, "_linear_pointwise") \
            and _has(torch.ops.mkldnn, "_reorder_linear_weight")
    except (AttributeError, RuntimeError):
        return False


def _mkl() -> bool:
    try:
        return bool(torch.backends.mkl.is_available()) and _has(torch.ops.mkl, "_mkl_linear")
    except (AttributeError, RuntimeError):
        return False


def available(dtype: torch.dtype) -> tuple[str, ...]:
    """The kernels this torch build offers for weights of `dtype` on a CPU."""
    names = ["mkl"]
    if dtype == torch.float32:
        names += ["mkl-t", "mkl-wx"]
    if _onednn():
        names.append("onednn")
        if dtype == torch.float32:
            names.append("onednn-t")
        names.append("onednn-packed")
    if dtype == torch.float32 and _mkl():
        names.append("mkl-packed")
    return tuple(names)


def form_of(kernel: str, m: int) -> str:
    """The weight form `kernel` needs for rows padded to `m` (only mkl-packed depends on m)."""
    return {"mkl": "plain", "mkl-wx": "plain", "onednn": "plain", "mkl-t": "t", "onednn-t": "t",
            "onednn-packed": "onednn"}.get(kernel, f"mkl@{m}")


def make_form(form: str, w: torch.Tensor) -> Any:
    """Build weight form `form` of the `[out, in]` weight `w`."""
    if form == "plain":
        return w
    if form == "t":
        return w.detach().t().contiguous()  # [in, out] in memory
    if form == "onednn":
        return torch.ops.mkldnn._reorder_linear_weight(w.detach())
    if form.startswith("mkl@"):
        return torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), int(form[4:]))
    raise ValueError(f"unknown weight form {form}")


def form_bytes(form: str, made: Any) -> int:
    """Memory a built form holds beyond the model's own weight (MKL's packed buffer is larger
    than the weight: it is allocated as many floats as the packed size has bytes)."""
    return 0 if form == "plain" else int(made.numel() * made.element_size())


def call_for(kernel: str, w: torch.Tensor, form: Any, m: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """`x -> x @ w.T` for `x` `[..., q, in]` through `kernel` with the prepared `form`."""
    if kernel == "mkl":
        return lambda x: F.linear(x, w)
    if kernel == "mkl-t":
        wt = form.t()
        return lambda x: F.linear(x, wt)
    if kernel == "mkl-wx":
        def weight_left(x: torch.Tensor) -> torch.Tensor:
            flat = x.reshape(-1, x.shape[-1])
            return torch.mm(w, flat.t()).t().contiguous().view(*x.shape[:-1], w.shape[0])
        return weight_left
    pointwise = torch.ops.mkldnn._linear_pointwise if _onednn() else None
    if kernel == "onednn":
        return lambda x: pointwise(x, w, None, "none", [], "")
    if kernel == "onednn-t":
        wt = form.t()
        return lambda x: pointwise(x, wt, None, "none", [], "")
    if kernel == "onednn-packed":
        return lambda x: pointwise(x, form, None, "none", [], "")
    if kernel == "mkl-packed":
        mkl_linear = torch.ops.mkl._mkl_linear

        def padded(x: torch.Tensor) -> torch.Tensor:
            q = x.shape[-2]
            flat = x.reshape(-1, x.shape[-1])
            if flat.shape[0] != m:  # MKL's packed weight is packed for exactly m rows
                flat = torch.cat((flat, flat.new_zeros(m - flat.shape[0], flat.shape[1])))
            y = mkl_linear(flat, form, w, None, m)
            return y[: x.numel() // x.shape[-1]].reshape(*x.shape[:-2], q, y.shape[-1])
        return padded
    raise ValueError(f"unknown kernel {kernel}")


@dataclass
class Plan:
    """Per weight shape `"OUTxIN"`: the kernel of each bucket (len(BUCKETS) + 1 names, the last
    for q > 128). `fixed` names one kernel for every shape and bucket (`--kernels NAME`)."""

    choices: dict[str, list[str]] = field(default_factory=dict)
    fixed: Optional[str] = None
    timings: dict[str, dict[str, list[Optional[float]]]] = field(default_factory=dict)  # shape -> kernel -> ms per bucket
    key: dict[str, Any] = field(default_factory=dict)
    measured_at: str = ""
    loadavg: list[float] = field(default_factory=list)
    max_forms: int = DEFAULT_MAX_FORMS
    # per bucket "short" (targets/hf/forward/short.py) or "sdpa"; None: short up to SHORT_MAX_Q rows, then sdpa
    attention: Optional[list[str]] = None
    attention_timings: dict[str, list[float]] = field(default_factory=dict)

    def kernels_for(self, shape: str) -> list[str]:
        if self.fixed:
            return [self.fixed] * (len(BUCKETS) + 1)
        if shape not in self.choices:
            raise KeyError(f"the kernel plan has no entry for weight shape {shape}")
        return self.choices[shape]

    def to_dict(self) -> dict:
        return {"choices": self.choices, "fixed": self.fixed, "timings": self.timings, "key": self.key,
                "measured_at": self.measured_at, "loadavg": self.loadavg, "max_forms": self.max_forms,
                "buckets": [list(b) for b in BUCKETS], "attention": self.attention,
                "attention_timings": self.attention_timings}

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        choices = data.get("choices")
        if not isinstance(choices, dict) or not all(
                isinstance(v, list) and len(v) == len(BUCKETS) + 1 and all(k in KERNELS for k in v)
                for v in choices.values()):
            raise ValueError("kernel plan: 'choices' must map shapes to one known kernel per bucket")
        if [list(b) for b in BUCKETS] != data.get("buckets"):
            raise ValueError("kernel plan: made for other buckets")
        attention = data.get("attention")
        if attention is not None and (not isinstance(attention, list) or len(attention) != len(BUCKETS) + 1
                                      or not all(a in ATTENTION for a in attention)):
            raise ValueError("kernel plan: 'attention' must name short or sdpa per bucket")
        return cls(choices=choices, fixed=data.get("fixed"), timings=dict(data.get("timings") or {}),
                   key=dict(data.get("key") or {}), measured_at=str(data.get("measured_at", "")),
                   loadavg=list(data.get("loadavg") or []), max_forms=int(data.get("max_forms", DEFAULT_MAX_FORMS)),
                   attention=attention, attention_timings=dict(data.get("attention_timings") or {}))

    def attention_by_q(self) -> list[str]:
        """Index q (1..128) -> "short" or "sdpa"; index 0 is the choice for longer blocks."""
        from specbench_cli.targets.hf.forward.short import SHORT_MAX_Q

        names = self.attention or [("short" if hi <= SHORT_MAX_Q else "sdpa") for _, hi in BUCKETS] + ["sdpa"]
        by_q = [names[-1]]
        for b, (lo, hi) in enumerate(BUCKETS):
            by_q.extend([names[b]] * (hi - lo + 1))
        return by_q

    def summary(self) -> dict[str, str]:
        """Shape -> 'q1:mkl q2-8:mkl-t q9+:onednn-packed' (runs of one kernel merged), for manifests."""
        bounds = list(BUCKETS) + [(BUCKETS[-1][1] + 1, None)]
        out = {}
        for shape in (["*"] if self.fixed else sorted(self.choices)):
            ks = self.kernels_for(shape)
            parts, start = [], 0
            for i in range(1, len(ks) + 1):
                if i == len(ks) or ks[i] != ks[start]:
                    lo, hi = bounds[start][0], bounds[i - 1][1]
                    label = f"{lo}+" if hi is None else (f"{lo}" if lo == hi else f"{lo}-{hi}")
                    parts.append(f"q{label}:{ks[start]}")
                    start = i
            out[shape] = " ".join(parts)
        if self.attention:
            runs, start = [], 0
            for i in range(1, len(self.attention) + 1):
                if i == len(self.attention) or self.attention[i] != self.attention[start]:
                    lo, hi = bounds[start][0], bounds[i - 1][1]
                    label = f"{lo}+" if hi is None else (f"{lo}" if lo == hi else f"{lo}-{hi}")
                    runs.append(f"q{label}:{self.attention[start]}")
                    start = i
            out["attention"] = " ".join(runs)
        return out


def shape_key(w: torch.Tensor) -> str:
    return f"{w.shape[0]}x{w.shape[1]}"


def _time(fn: Callable[[], Any], rounds: int) -> float:
    fn()  # warm-up: primitive creation, allocator
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1000 * statistics.median(ts)


def calibrate(groups: dict[str, list[torch.Tensor]], rounds: int = 5, max_forms: int = DEFAULT_MAX_FORMS,
              candidates: Optional[tuple[str, ...]] = None,
              progress: Optional[Callable[[int, int], None]] = None) -> Plan:
    """Time every candidate kernel on the weights of each shape (all matrices of that shape, as
    one forward reads them: distinct tensors, so nothing stays in cache that would not), per
    bucket at the bucket's two ends, and choose (module doc). `groups`: shape -> weights."""
    if not groups:
        return Plan(max_forms=max_forms)
    dtype = next(iter(groups.values()))[0].dtype
    names = candidates or available(dtype)
    points = [(lo, hi) for lo, hi in BUCKETS] + [(PREFILL_M, PREFILL_M)]
    timings: dict[str, dict[str, list[Optional[float]]]] = {}
    total = len(groups) * len(names) * len(points)
    done = 0
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for shape, ws in groups.items():
            timings[shape] = {}
            for kernel in names:
                row: list[Optional[float]] = []
                shared: dict[str, list[Any]] = {}
                for b, (lo, hi) in enumerate(points):
                    done += 1
                    last = b == len(points) - 1
                    if kernel == "mkl-packed" and last:  # packed for one M: not for prefills of any length
                        row.append(None)
                        continue
                    form = form_of(kernel, hi)
                    if form not in shared:
                        if kernel == "mkl-packed":
                            shared.clear()  # one M at a time: bound the temporary memory
                        shared[form] = [make_form(form, w) for w in ws]
                    calls = [call_for(kernel, w, f, hi) for w, f in zip(ws, shared[form])]
                    cost = 0.0
                    for m in sorted({lo, hi}):
                        x = torch.randn(1, m, ws[0].shape[1], generator=gen).to(dtype)
                        cost += _time(lambda: [c(x) for c in calls], rounds)
                    row.append(cost / len({lo, hi}))
                    if progress:
                        progress(done, total)
                timings[shape][kernel] = row
    choices = {shape: choose(t, max_forms) for shape, t in timings.items()}
    return Plan(choices=choices, timings=timings, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                loadavg=list(os.getloadavg()) if hasattr(os, "getloadavg") else [], max_forms=max_forms)


def calibrate_attention(heads: int, kv_heads: int, head_dim: int, layers: int, dtype: torch.dtype,
                        context: int = 400, rounds: int = 5) -> tuple[list[str], dict[str, list[float]]]:
    """Per bucket, the faster of this project's few-row attention (`short`) and SDPA, timed for
    `layers` calls over `context` cached tokens with an additive tree mask (what a verify step
    passes; AR's single row needs none). Returns (choices, ms per bucket for each)."""
    from specbench_cli.targets.hf.forward.short import long_attention, short_attention

    gen = torch.Generator().manual_seed(0)
    points = [(lo, hi) for lo, hi in BUCKETS] + [(PREFILL_M, PREFILL_M)]
    times: dict[str, list[float]] = {"short": [], "sdpa": []}
    with torch.inference_mode():
        for lo, hi in points:
            cost = {"short": 0.0, "sdpa": 0.0}
            for m in sorted({lo, hi}):
                length = context + m
                q = torch.randn(1, heads, m, head_dim, generator=gen).to(dtype)
                k = torch.randn(1, kv_heads, length, head_dim, generator=gen).to(dtype)
                v = torch.randn(1, kv_heads, length, head_dim, generator=gen).to(dtype)
                mask = None
                if m > 1:
                    mask = torch.zeros(1, 1, m, length, dtype=dtype)
                    mask[..., context:] = torch.full((m, m), torch.finfo(dtype).min, dtype=dtype).triu(1)
                cost["short"] += _time(lambda: [short_attention(None, q, k, v, mask, 1.0, force=True)
                                                for _ in range(layers)], rounds)
                cost["sdpa"] += _time(lambda: [long_attention(q, k, v, mask, 1.0) for _ in range(layers)], rounds)
            for name in times:
                times[name].append(cost[name] / len({lo, hi}))
    choices = [min(ATTENTION, key=lambda a: times[a][b]) for b in range(len(points))]
    return choices, times


def choose(timing: dict[str, list[Optional[float]]], max_forms: int) -> list[str]:
    """Per bucket the fastest kernel, then drop extra weight forms past `max_forms` (module doc)."""
    n = len(BUCKETS) + 1
    his = [hi for _, hi in BUCKETS] + [PREFILL_M]
    allowed = dict(timing)

    def best(b: int, banned: set[str]) -> str:
        opts = [(t[b], k) for k, t in allowed.items() if t[b] is not None and form_of(k, his[b]) not in banned]
        return min(opts)[1]

    banned: set[str] = set()
    while True:
        picks = [best(b, banned) for b in range(n)]
        extra = {form_of(k, his[b]) for b, k in enumerate(picks)} - {"plain"}
        if len(extra) <= max_forms:
            return picks
        loss = {}
        for f in extra:
            trial = [best(b, banned | {f}) for b in range(n)]
            loss[f] = sum(allowed[t][b] - allowed[p][b] for b, (t, p) in enumerate(zip(trial, picks)))
        banned.add(min(loss, key=lambda f: (loss[f], f)))


class PlannedLinear:
    """`x @ w.T` with the plan's kernel for x's row count; holds the forms it needs."""

    __slots__ = ("by_q", "big", "kernels", "extra_bytes")

    def __init__(self, w: torch.Tensor, kernels: list[str]):
        his = [hi for _, hi in BUCKETS] + [PREFILL_M]
        forms: dict[str, Any] = {}
        calls: dict[tuple[str, int], Callable] = {}
        per_bucket = []
        for b, k in enumerate(kernels):
            if k == "mkl-packed" and b == len(BUCKETS):
                k = "mkl"  # never chosen by calibrate; a fixed plan falls back for prefills
            m = his[b]
            form = form_of(k, m)
            if form not in forms:
                forms[form] = make_form(form, w)
            ck = (k, m if k == "mkl-packed" else 0)
            if ck not in calls:
                calls[ck] = call_for(k, w, forms[form], m)
            per_bucket.append(calls[ck])
        self.by_q = [per_bucket[0]]  # index 0 unused
        for b, (lo, hi) in enumerate(BUCKETS):
            self.by_q.extend([per_bucket[b]] * (hi - lo + 1))
        self.big = per_bucket[-1]
        self.kernels = list(kernels)
        self.extra_bytes = sum(form_bytes(f, made) for f, made in forms.items())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        q = x.shape[-2]
        return self.by_q[q](x) if q < len(self.by_q) else self.big(x)
