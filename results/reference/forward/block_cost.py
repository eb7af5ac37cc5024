"""Cost of one target forward by block size (tokens per forward), dtype and threads.

    python results/reference/forward/block_cost.py --past 400 --blocks 1,10,30,60 --threads 1,2 --dtypes float32,bfloat16

Median of --reps forwards after a warm-up; the cache is rolled back after each forward.
This is the table behind the default --dtype and --threads and the block-complexity trade-off.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specbench_cli.targets.hf.kv import KVCache
from specbench_cli.models.load import load_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--past", type=int, default=400)
    ap.add_argument("--blocks", default="1,10,30,60")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    print("| dtype | threads | " + " | ".join(f"q={b} ms" for b in blocks) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in blocks) + " |")
    for dtype in args.dtypes.split(","):
        model = load_model(args.model, dtype=dtype).model
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            cells = []
            with torch.inference_mode():
                cache = KVCache()
                model(input_ids=torch.randint(100, 30000, (1, args.past)), past_key_values=cache.hf, use_cache=True)
                for q in blocks:
                    times = []
                    for r in range(args.reps + 2):
                        ids = torch.randint(100, 30000, (1, q))
                        t = time.perf_counter()
                        model(input_ids=ids, past_key_values=cache.hf, use_cache=True)
                        times.append(time.perf_counter() - t)
                        cache.crop_to(args.past)
                    cells.append(f"{1000 * statistics.median(times[2:]):.0f}")
            print(f"| {dtype} | {threads} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
