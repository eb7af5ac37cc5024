"""Where the time of one target forward goes: torch.profiler over q=1 and q=10 forwards.

    python results/reference/forward/forward_profile.py --dtype float32 --threads 1 --forward sdpa \
        -o results/reference/forward/profile-float32-sdpa-t1.json

The cache holds `--context` tokens; each profiled forward appends q tokens and is rolled back,
exactly as `specbench cost` times it. Self CPU time of every aten op is grouped into
matmul (mm/addmm/bmm/linear GEMMs), attention (SDPA kernels or the eager softmax path),
and everything else; the wall time per forward is measured outside the profiler (the
profiler's own per-op cost inflates the profiled total, which is reported separately).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_json import write_result  # noqa: E402

MATMUL = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_mkl_linear", "mkldnn::_linear_pointwise",
          "aten::mkldnn_rnn_layer", "aten::_weight_int8pack_mm"}
ATTENTION = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
             "aten::_softmax", "aten::_safe_softmax"}


def group(op: str) -> str:
    if op in MATMUL:
        return "matmul"
    if op in ATTENTION:
        return "attention"
    return "other"


def profile(lm, q: int, context: int, iters: int, fast: bool) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile as tprof

    from specbench_cli.targets.hf.kv import KVCache

    model = lm.model
    gen = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(100, model.config.vocab_size, (1, n), generator=gen)  # noqa: E731
    with torch.inference_mode():
        cache = KVCache()
        model(input_ids=ids(context), past_key_values=cache.hf, use_cache=True)
        walls = []
        for i in range(iters + 3):  # 3 warm-up forwards
            block = ids(q)
            t = time.perf_counter()
            model(input_ids=block, past_key_values=cache.hf, use_cache=True)
            if i >= 3:
                walls.append(1000 * (time.perf_counter() - t))
            cache.crop_to(context)
        with tprof(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(iters):
                model(input_ids=ids(q), past_key_values=cache.hf, use_cache=True)
                cache.crop_to(context)
    per_group: dict[str, float] = defaultdict(float)
    ops = []
    calls = 0
    for e in prof.key_averages():
        self_ms = e.self_cpu_time_total / 1000 / iters
        per_group[group(e.key)] += self_ms
        calls += e.count
        ops.append((e.key, round(self_ms, 3), e.count // iters))
    ops.sort(key=lambda r: -r[1])
    profiled = sum(per_group.values())
    return {"q": q, "wall_ms_median": round(statistics.median(walls), 2), "profiled_ms": round(profiled, 2),
            "aten_calls_per_forward": calls // iters,
            "share": {k: round(v / profiled, 3) for k, v in sorted(per_group.items())},
            "ms": {k: round(v, 2) for k, v in sorted(per_group.items())},
            "top_ops": [{"op": k, "self_ms": ms, "calls": n} for k, ms, n in ops[:15]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--forward", default="sdpa", help="sdpa, eager, short or lean")
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--q", default="1,10")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    import torch

    from specbench_cli.models.load import load_model

    torch.set_num_threads(args.threads)
    lm = load_model(args.model, dtype=args.dtype, forward=args.forward)
    res = {"model": args.model, "dtype": args.dtype, "threads": args.threads, "forward": args.forward,
           "context": args.context, "torch": torch.__version__, "loadavg_before": os.getloadavg()[0],
           "profiles": [profile(lm, int(q), args.context, args.iters, False) for q in args.q.split(",")]}
    res["loadavg_after"] = os.getloadavg()[0]
    text = write_result(res, args.out)
    print(text if not args.out else json.dumps({p["q"]: (p["wall_ms_median"], p["share"]) for p in res["profiles"]}),
          file=sys.stdout)


if __name__ == "__main__":
    main()
