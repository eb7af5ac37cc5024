"""The device's cost curve: t(q), the time of one target forward over q new tokens.

Whether a speculative method pays depends on how much more a q-token forward costs than a
1-token one on *this* device, dtype and thread count (2x at q=10 in float32 on a 2-core CPU,
1.2x in bfloat16, nearly 1x on a GPU). `measure_curve` times it:

- the cache is filled with `context` tokens once; every timed forward appends q tokens and is
  then rolled back, so every q sees the same context length;
- `warmup` untimed forwards first (allocator, thread pool, kernel selection);
- rounds: each round times every q once, in a shuffled order, so slow drift of the machine
  (another process, thermal state) spreads over all q instead of biasing the last ones;
- the value per q is the median over rounds.

At batch size N (`batch_size` > 1) the curve is t(N, q): one forward over N sequences of q new
tokens each, every sequence with `context` cached tokens. Every forward is the target's own
`verify` (decoding/target.py), the call the decoding loop makes: per-sequence masks and positions,
the output head on the real rows, on whatever computes the target.

Curves are cached as JSON under `<model cache>/cost/`, keyed by everything that changes the
numbers (model, device, dtype, threads, context, torch version, attention implementation, and
the batch size when above 1).
"""

from __future__ import annotations

import math
import platform
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from specbench_cli.atomic import atomic_write
from specbench_cli.json_cache import KeyedJsonCache
from specbench_cli.options import Bound


@dataclass
class CostCurve:
    """t(q) in milliseconds for q = 1..len(ms); `ms[q-1]` is the median forward time for q tokens."""

    ms: list[float]
    key: dict[str, Any]
    rounds: int
    measured_at: str = ""
    spread: list[float] = field(default_factory=list)  # (max - min) / median per q, a noise indicator
    roofline: Optional[dict] = None  # run/auto/roofline.py: bandwidth, matmul peak, sizes (CPU only)
    remeasured: list[int] = field(default_factory=list)  # q whose first value was a spike (t(q) > 1.2 t(q+1))

    @property
    def max_q(self) -> int:
        return len(self.ms)

    def t(self, q: int) -> float:
        """Forward time for q tokens (ms); beyond the measured range, linear extrapolation."""
        if q < 1:
            raise ValueError("q must be >= 1")
        if q <= self.max_q:
            return self.ms[q - 1]
        if self.max_q == 1:
            return self.ms[0] * q
        slope = (self.ms[-1] - self.ms[-2])
        return self.ms[-1] + slope * (q - self.max_q)

    def ratio(self, q: int) -> float:
        """t(q) / t(1): what a q-token block costs in single-token forwards."""
        return self.t(q) / self.ms[0]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CostCurve":
        """A curve from its JSON (the cache's), every field checked: what a later run computes with
        must be finite, positive numbers (a cached `Infinity` or `true` made `--bc auto` predict
        0 tok/s or 702 tok/s). ValueError says which field is wrong."""
        ms = data.get("ms")
        if not isinstance(ms, list) or not ms or not all(_positive(v) for v in ms):
            raise ValueError("cost curve: 'ms' must be a non-empty list of positive numbers")
        rounds, spread, again = data.get("rounds", 0), data.get("spread") or [], data.get("remeasured") or []
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            raise ValueError("cost curve: 'rounds' must be a whole number >= 0")
        if not isinstance(spread, list) or not all(_positive(v) or v == 0 for v in spread):
            raise ValueError("cost curve: 'spread' must be a list of numbers >= 0")
        if not isinstance(again, list) or not all(_whole(q) and 1 <= q <= len(ms) for q in again):
            raise ValueError("cost curve: 'remeasured' must list q values of the curve")
        if not isinstance(data.get("key", {}), dict) or not isinstance(data.get("measured_at", ""), str):
            raise ValueError("cost curve: 'key' must be an object and 'measured_at' a string")
        roof = data.get("roofline")
        if roof is not None and not (isinstance(roof, dict) and all(
                _positive(roof.get(name)) for name in ("bandwidth_gbs", "peak_gflops", "weight_bytes",
                                                       "matmul_params", "context"))
                and all(_positive(roof.get(n)) or roof.get(n) == 0
                        for n in ("kv_bytes_per_token", "attn_flops_per_pair"))):
            raise ValueError("cost curve: 'roofline' must hold the floor's positive numbers")
        return cls(ms=[float(v) for v in ms], key=dict(data.get("key") or {}), rounds=rounds,
                   measured_at=data.get("measured_at", ""), spread=[float(v) for v in spread],
                   roofline=dict(roof) if roof is not None else None, remeasured=list(again))

    def floor(self, q: int) -> Optional[float]:
        """The machine's floor for a q-token forward in ms (None when not measured)."""
        if not self.roofline:
            return None
        from specbench_cli.run.auto.roofline import Roofline

        return Roofline.from_dict(self.roofline).floor_ms(q)


def curve_key(model_ref: str, resolved: str, device: str, dtype: str, threads: int, context: int,
              attn: str, kernels: Optional[dict] = None, batch_size: int = 1) -> dict[str, Any]:
    """What the curve depends on; `kernels` is the lean forward's plan (`LoadedModel.kernels`),
    so a re-timed kernel plan or another instruction set never reuses an old curve. The batch
    size enters the key only above 1 (curves measured before it existed stay valid)."""
    import torch

    from specbench_cli.targets.hf.forward.cpuinfo import cpu_flags, cpu_model

    key = {"model": model_ref, "resolved": resolved, "device": device, "dtype": dtype, "threads": threads,
           "context": context, "torch": torch.__version__, "attn": attn, "machine": platform.machine()}
    if kernels:
        key["kernels"] = {"mode": kernels.get("mode"), "plan": kernels.get("plan")}
    if str(device).startswith("cpu"):
        key["cpu"] = {"model": cpu_model(), "flags": cpu_flags()}
    if batch_size > 1:
        key["batch_size"] = batch_size
    return key


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive(v: object) -> bool:
    """A finite number > 0 (a bool is no number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


# curves are a keyed JSON cache (json_cache.py): validated on read (`from_dict`), measured
# again with one warning when invalid; a cache that cannot be written is one warning, never a crash
CACHE = KeyedJsonCache("cost", "cost curve", "measuring it again", CostCurve.from_dict, CostCurve.to_dict)


def _root() -> Path:
    from specbench_cli.models.load import cache_root

    return cache_root()


def cache_path(key: dict[str, Any]) -> Path:
    return CACHE.path(key, _root())


def load_cached(key: dict[str, Any]) -> Optional[CostCurve]:
    """The cached curve for `key`, or None (missing, or invalid: then one warning line)."""
    return CACHE.load(key, _root())


def save_cached(curve: CostCurve) -> Optional[Path]:
    """Write the curve; None when the cache cannot be written (one warning: the curve is still used)."""
    return CACHE.save(curve, _root())


def bounds() -> dict[str, Bound]:
    """`specbench cost`'s number options, flag -> its declared bound (one declaration: the
    command's check and the CLI's early number check both read it)."""
    from specbench_cli.config.syntax import MAX_BATCH

    return {"--batch-size": Bound(1, MAX_BATCH), "--max-q": Bound(1, 1024), "--context": Bound(1, 32768),
            "--repeats": Bound(1, 1000), "--warmup": Bound(0, 1000)}


def validate(max_q: int, context: int, rounds: int, warmup: int, batch_size: int = 1) -> None:
    """Bad settings fail before any model loads."""
    declared = bounds()
    for flag, value in (("--batch-size", batch_size), ("--max-q", max_q), ("--context", context),
                        ("--repeats", rounds), ("--warmup", warmup)):
        declared[flag].check(value, flag)


def measure_curve(target: Any, max_q: int, context: int = 400, rounds: int = 5, warmup: int = 3,
                  seed: int = 0, key: Optional[dict] = None,
                  progress: Optional[Callable[[int, int], None]] = None, batch_size: int = 1) -> CostCurve:
    """Time one verify forward of q = 1..max_q new tokens after `context` cached tokens (see module
    doc), for one sequence or, at `batch_size` N > 1, for N sequences at once, through the target's
    own protocol (decoding/target.py): what the decoding loop calls, on any target. `target` is a
    `Target` or a transformers model (wrapped in an `HFTarget`)."""
    import torch

    from specbench_cli.decoding.draft import Draft
    from specbench_cli.targets import as_target

    target = as_target(target)
    n = batch_size
    device = target.device
    vocab = target.vocab_size
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    low = min(100, vocab - 1)

    def tokens(k: int) -> list[int]:
        return torch.randint(low, vocab, (k,), generator=gen).tolist()

    def sync() -> None:
        if getattr(device, "type", None) == "cuda":
            torch.cuda.synchronize(device)

    with torch.inference_mode():
        # each sequence's context prefilled on its own, as the decoding loop does
        batch, _ = target.start([tokens(context) for _ in range(n)], max_q)
        past = batch.length

        def time_one(q: int) -> float:
            roots, drafts = tokens(n), [Draft.chain(tokens(q - 1)) for _ in range(n)]
            sync()
            start = time.perf_counter()
            target.verify(batch, roots, drafts)
            sync()
            elapsed = 1000 * (time.perf_counter() - start)
            target.commit(batch, past, [[] for _ in range(n)])  # rolled back: every q sees the same context
            return elapsed

        for i in range(warmup):
            time_one(1 + i % max_q)
        return _timed_rounds(time_one, max_q, rounds, rng, key, progress)


def _timed_rounds(time_one: Callable[[int], float], max_q: int, rounds: int, rng: random.Random,
                  key: Optional[dict], progress: Optional[Callable[[int, int], None]]) -> CostCurve:
    """`rounds` passes over q = 1..max_q in a fresh shuffled order each, spikes re-timed; the
    curve is each q's median, its spread (max - min) / median."""
    samples: dict[int, list[float]] = {q: [] for q in range(1, max_q + 1)}
    total = rounds * max_q
    for r in range(rounds):
        order = list(range(1, max_q + 1))
        rng.shuffle(order)
        for j, q in enumerate(order):
            samples[q].append(time_one(q))
            if progress:
                progress(r * max_q + j + 1, total)
    remeasured = remeasure_spikes(samples, time_one, rounds)
    ms = [statistics.median(samples[q]) for q in range(1, max_q + 1)]
    spread = [(max(samples[q]) - min(samples[q])) / m for q, m in zip(range(1, max_q + 1), ms)]
    return CostCurve(ms=ms, key=key or {}, rounds=rounds, spread=spread, remeasured=remeasured,
                     measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


SPIKE = 1.2  # t(q) > SPIKE * t(q + 1): a forward cannot get cheaper by a fifth with one token more
SPIKE_PASSES = 3


def spikes(ms: list[float]) -> list[int]:
    """The q (1-based) whose time exceeds SPIKE times the next q's."""
    return [q for q in range(1, len(ms)) if ms[q - 1] > SPIKE * ms[q]]


def remeasure_spikes(samples: dict[int, list[float]], time_one: Callable[[int], float], rounds: int) -> list[int]:
    """Re-time every spike and its neighbour (a burst of load hits one q, or a shape the kernel
    library handles badly once), replacing their samples, up to SPIKE_PASSES times, so `--bc
    auto` never chases a spike. Returns the q re-timed; a spike that survives is real."""
    touched: list[int] = []
    for _ in range(SPIKE_PASSES):
        qs = sorted(samples)
        ms = [statistics.median(samples[q]) for q in qs]
        found = spikes(ms)
        if not found:
            break
        for q in found:
            for qq in (q, q + 1):
                samples[qq] = [time_one(qq) for _ in range(max(rounds, 3))]
            if q not in touched:
                touched.append(q)
    return touched


def curve_rows(curve: CostCurve, every: int = 1) -> list[tuple[int, float, float]]:
    """(q, ms, t(q)/t(1)) for the table: every q up to 16, then every `every`-th plus the last."""
    rows = []
    for q in range(1, curve.max_q + 1):
        if q <= 16 or q % every == 0 or q == curve.max_q:
            rows.append((q, curve.t(q), curve.ratio(q)))
    return rows


def plot_curve(curve: CostCurve, path: Path, title: str = "") -> Path:
    """Two panels: ms vs q (with the machine's floor when measured), and t(q)/t(1) vs q. PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    qs = list(range(1, curve.max_q + 1))
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(qs, curve.ms, marker=".", lw=1, label="t(q), measured")
    if curve.roofline:
        a.plot(qs, [curve.floor(q) for q in qs], lw=1.2, ls="--", color="black",
               label="floor: max(bytes/bandwidth, flops/peak)")
        a.legend(fontsize=7, loc="upper left")
    a.set_ylim(bottom=0)
    a.set_xlabel("tokens per forward (q)")
    a.set_ylabel("ms per forward")
    a.grid(alpha=0.3)
    b.plot(qs, [curve.ratio(q) for q in qs], marker=".", lw=1, color="tab:orange", label="t(q) / t(1)")
    if curve.roofline:
        b.plot(qs, [curve.floor(q) / curve.floor(1) for q in qs], lw=1.2, ls="--", color="black",
               label="floor(q) / floor(1)")
        b.legend(fontsize=7, loc="upper left")
    b.axhline(1.0, color="grey", lw=0.8, ls=":")
    b.set_xlabel("tokens per forward (q)")
    b.set_ylabel("t(q) / t(1)")
    b.grid(alpha=0.3)
    k = curve.key
    cpu = k.get("cpu") or {}
    from specbench_cli.targets.hf.forward.cpuinfo import isa_label

    isa = isa_label(cpu.get("flags")) if cpu else ""
    fig.suptitle(title or f"{k.get('model', '')} · {k.get('device', '')}{f' ({isa})' if isa else ''} · "
                 f"{k.get('dtype', '')} · {k.get('threads', '')} threads · context {k.get('context', '')}"
                 + (f" · {k['batch_size']} sequences per forward" if k.get("batch_size") else ""),
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return path
