"""Time one target forward per `--forward` flavour, interleaved in one process.

    python results/reference/forward/forward_speed.py --dtype float32 --threads 1 --forwards sdpa,short,lean \
        -o results/reference/forward/speed-float32-t1.json

One model per flavour (lean rewrites its model), the same cache contents for all: `--context`
random tokens, then each timed forward appends q tokens and is rolled back. Rounds visit the
flavours in rotating order, so drift of a shared machine spreads over all of them. Reported
per flavour and q: median wall ms and median CPU ms of this thread (with --threads 1 the CPU
time is the work done, which neighbours' load inflates far less than wall time), plus the
1-minute load average before and after.
"""

from __future__ import annotations

import sys

import argparse
import os
import statistics
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_json import write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--forwards", default="sdpa,short,lean")
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument("--q", default="1,10")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    import torch

    from specbench_cli.targets.hf.kv import KVCache
    from specbench_cli.models.load import load_model

    torch.set_num_threads(args.threads)
    flavours = args.forwards.split(",")
    qs = [int(q) for q in args.q.split(",")]
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(100, 40000, (1, args.context), generator=gen)
    block = torch.randint(100, 40000, (1, max(qs)), generator=gen)
    models, caches = {}, {}
    with torch.inference_mode():
        for f in flavours:
            models[f] = load_model(args.model, dtype=args.dtype, forward=f).model
            caches[f] = KVCache()
            models[f](input_ids=context, past_key_values=caches[f].hf, use_cache=True)
        wall = {(f, q): [] for f in flavours for q in qs}
        cpu = {(f, q): [] for f in flavours for q in qs}
        load_before = os.getloadavg()[0]
        for r in range(args.rounds + 2):  # two warm-up rounds
            for f in flavours[r % len(flavours):] + flavours[:r % len(flavours)]:
                for q in qs:
                    t, c = time.perf_counter(), time.thread_time()
                    models[f](input_ids=block[:, :q], past_key_values=caches[f].hf, use_cache=True)
                    if r >= 2:
                        wall[f, q].append(1000 * (time.perf_counter() - t))
                        cpu[f, q].append(1000 * (time.thread_time() - c))
                    caches[f].crop_to(args.context)
    res = {"model": args.model, "dtype": args.dtype, "threads": args.threads, "context": args.context,
           "rounds": args.rounds, "torch": torch.__version__, "loadavg_before": round(load_before, 2),
           "loadavg_after": round(os.getloadavg()[0], 2),
           "ms": {f: {str(q): {"wall_median": round(statistics.median(wall[f, q]), 2),
                               "cpu_median": round(statistics.median(cpu[f, q]), 2),
                               "wall_min": round(min(wall[f, q]), 2)} for q in qs} for f in flavours}}
    text = write_result(res, args.out)
    print(text)


if __name__ == "__main__":
    main()
