"""Where the native forward's step goes: q = 1 and q = 10 new tokens over a cache of 400, the
library built with its per-phase timers (SPECBENCH_NATIVE_PROFILE=1), 2 threads, float32.

    python native_profile.py OUT.json      -> prints a Markdown table, writes the numbers

Phases (forward.c): the q/k/v product with its RMSNorm, rope + cache write, the keys transposed
for the scores, attention, the o
product, the gate/up product with its RMSNorm, SiLU x up, the down product; then the output
head (its own call) and the rest (embedding, rope tables, the cache's bookkeeping, Python).
Each phase ends at a barrier, so it includes the faster thread waiting for the slower."""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import time

os.environ["SPECBENCH_NATIVE_PROFILE"] = "1"

import torch  # noqa: E402

from specbench_cli.atomic import atomic_write  # noqa: E402
from specbench_cli.models.load import load_model  # noqa: E402
from specbench_cli.targets.hf.kv import KVCache  # noqa: E402

PHASES = ["q/k/v product (+ norm)", "rope + cache write", "attention", "o product", "gate/up product (+ norm)",
          "SiLU x up", "down product", "keys transposed"]
ORDER = [0, 1, 7, 2, 3, 4, 5, 6]  # the table's rows in the step's order
MATMUL = {0, 3, 4, 6}


def main(out: str) -> None:
    torch.set_num_threads(2)
    lm = load_model(forward="native")
    model = lm.target.model
    native = model.model._specbench_native
    prof = (ctypes.c_double * 8).in_dll(native.lib, "sb_profile")
    cache = KVCache()
    result = {"capability": str(torch.backends.cpu.get_cpu_capability()), "context": 400, "threads": 2, "q": {}}
    with torch.inference_mode():
        model(input_ids=torch.tensor([list(range(1000, 1400))]), past_key_values=cache.hf, use_cache=True)
        for q in (1, 10):
            block = torch.tensor([list(range(2000, 2000 + q))])
            hidden = model.model(input_ids=block, past_key_values=cache.hf, use_cache=True).last_hidden_state
            cache.crop_to(400)
            walls, heads = [], []
            for i in range(8):
                prof[i] = 0.0
            rounds = 20
            for _ in range(rounds):
                t0 = time.perf_counter()
                model(input_ids=block, past_key_values=cache.hf, use_cache=True)
                walls.append(time.perf_counter() - t0)
                cache.crop_to(400)
                t0 = time.perf_counter()
                model.lm_head(hidden)
                heads.append(time.perf_counter() - t0)
            wall = statistics.mean(walls) * 1000
            phases = [prof[i] / rounds * 1000 for i in range(8)]
            head = statistics.mean(heads) * 1000
            rest = wall - sum(phases) - head
            result["q"][q] = {"wall_ms": wall, "phases_ms": dict(zip(PHASES, phases)), "head_ms": head,
                              "rest_ms": rest,
                              "matmul_ms": sum(phases[i] for i in MATMUL) + head, "attention_ms": phases[2] + phases[7],
                              "other_ms": phases[1] + phases[5] + rest}
    atomic_write(out, json.dumps(result, indent=2))
    print(f"torch CPU capability {result['capability']}, 2 threads, float32, context 400 (mean of 20 forwards)\n")
    print("| part | q = 1 ms | share | q = 10 ms | share |\n| --- | ---: | ---: | ---: | ---: |")
    one, ten = result["q"][1], result["q"][10]
    for name in (PHASES[i] for i in ORDER):
        a, b = one["phases_ms"][name], ten["phases_ms"][name]
        print(f"| {name} | {a:.2f} | {100 * a / one['wall_ms']:.0f} % | {b:.2f} | {100 * b / ten['wall_ms']:.0f} % |")
    for key, name in (("head_ms", "output head"), ("rest_ms", "the rest (embedding, rope tables, cache, Python)")):
        print(f"| {name} | {one[key]:.2f} | {100 * one[key] / one['wall_ms']:.0f} % | {ten[key]:.2f} | "
              f"{100 * ten[key] / ten['wall_ms']:.0f} % |")
    print(f"| **forward** | **{one['wall_ms']:.2f}** | | **{ten['wall_ms']:.2f}** | |")
    print(f"\nmatrix products {one['matmul_ms']:.1f} / {ten['matmul_ms']:.1f} ms, attention {one['attention_ms']:.1f} / "
          f"{ten['attention_ms']:.1f} ms, the rest {one['other_ms']:.1f} / {ten['other_ms']:.1f} ms (q = 1 / q = 10)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "native-profile.json")
