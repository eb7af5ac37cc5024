"""The lean forward with its timed kernel plan against transformers' own forward (sdpa), q = 1..128,
interleaved in one process so both see the same machine state.

    python results/reference/roofline/forward_vs_sdpa.py --max-q 128 --rounds 5 -o OUT.json

Each round times, for every q in a shuffled order, one forward of each model (the order of the
two alternates), after 400 cached tokens, rolled back after each forward; the value per q is the
median over rounds. Prints the q where lean is slower than sdpa, and by how much.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

import torch

from specbench_cli.atomic import atomic_write
from specbench_cli.targets.hf.kv import KVCache
from specbench_cli.targets.hf.forward.cpuinfo import cpu_flags, cpu_model
from specbench_cli.models.load import load_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-q", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument("-o", "--out")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    models = {"sdpa": load_model(forward="sdpa").model, "lean": load_model(forward="lean").model}
    gen = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(100, 49152, (1, n), generator=gen)  # noqa: E731
    caches = {}
    with torch.inference_mode():
        prompt = ids(args.context)
        for name, m in models.items():
            caches[name] = KVCache()
            m(input_ids=prompt, past_key_values=caches[name].hf, use_cache=True)
            for q in (1, 8, 64):  # warm-up
                m(input_ids=ids(q), past_key_values=caches[name].hf, use_cache=True)
                caches[name].crop_to(args.context)
        samples = {n: {q: [] for q in range(1, args.max_q + 1)} for n in models}
        rng = random.Random(0)
        load = [os.getloadavg()[0]]
        for r in range(args.rounds):
            qs = list(range(1, args.max_q + 1))
            rng.shuffle(qs)
            for i, q in enumerate(qs):
                block = ids(q)
                for name in (("sdpa", "lean") if (i + r) % 2 else ("lean", "sdpa")):
                    t = time.perf_counter()
                    models[name](input_ids=block, past_key_values=caches[name].hf, use_cache=True)
                    samples[name][q].append(1000 * (time.perf_counter() - t))
                    caches[name].crop_to(args.context)
            load.append(os.getloadavg()[0])
    med = {n: [statistics.median(samples[n][q]) for q in range(1, args.max_q + 1)] for n in models}
    slower = [(q, round(med["lean"][q - 1] / med["sdpa"][q - 1], 3)) for q in range(1, args.max_q + 1)
              if med["lean"][q - 1] > med["sdpa"][q - 1]]
    result = {"cpu": cpu_model(), "flags": cpu_flags(), "threads": args.threads, "context": args.context,
              "rounds": args.rounds, "load_1min": load, "ms": med, "lean_slower_at": slower,
              "kernels": getattr(models["lean"].model, "_specbench_kernels").summary()}
    print(f"lean slower than sdpa at {len(slower)} of {args.max_q} q: {slower}")
    for q in (1, 2, 4, 10, 16, 32, 64, 81, 128):
        if q <= args.max_q:
            print(f"q={q:3d} sdpa {med['sdpa'][q - 1]:7.1f} ms  lean {med['lean'][q - 1]:7.1f} ms")
    if args.out:
        atomic_write(args.out, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
