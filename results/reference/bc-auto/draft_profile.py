"""Where a drafting method's own work goes, per decoding step.

    python results/reference/bc-auto/draft_profile.py --methods lookahead,tr-jacobi,mask-probe --bc 10 --dtype float32

For each method: decode the first turn of N `mini` questions with the real engine and report,
per step, the milliseconds in `propose`, in `observe`, in the target forward + verdict, and in
the loop's overhead (mask building, cache compaction), plus drafting's share of the step. With
--profile, cProfile's top functions inside propose/observe only (the forward is excluded, so
the list shows the drafter's own hot spots).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

from specbench_cli import methods as registry
from specbench_cli import tasks
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.models.load import load_model
from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn
from specbench_cli.targets import as_target


class Timed:
    """Wraps a method: times (and optionally profiles) `propose` and `observe` separately."""

    def __init__(self, method, profiler=None):
        self.m, self.prof = method, profiler
        self.propose_ms: list[float] = []
        self.observe_ms: list[float] = []

    def __getattr__(self, name):
        return getattr(self.m, name)

    def _call(self, fn, arg, out):
        if self.prof:
            self.prof.enable()
        t = time.perf_counter()
        r = fn(arg)
        out.append(1000 * (time.perf_counter() - t))
        if self.prof:
            self.prof.disable()
        return r

    def propose(self, state):
        return self._call(self.m.propose, state, self.propose_ms)

    def observe(self, result):
        return self._call(self.m.observe, result, self.observe_ms)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--methods", default="lookahead,tr-jacobi,mask-probe")
    ap.add_argument("--bc", type=int, default=10)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, dtype=args.dtype)
    prompter = ChatPrompter(lm.tokenizer)
    prompts = [prompter(user_turn(q.turns[0])) for q in tasks.get("mini").load(None)[:: 3][: args.questions]]
    dec = Decoder(as_target(lm.model), stop_token_ids(lm.tokenizer, lm.model))
    print(f"| method | BC | steps | propose ms | observe ms | verify ms | overhead ms | drafting share |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.methods.split(","):
        method = registry.get(name).create(MethodContext(lm.model, lm.tokenizer, budget=args.bc, dtype=args.dtype))
        dec.generate(method, prompts[0], 8, args.bc)  # warm-up
        prof = cProfile.Profile() if args.profile else None
        timed = Timed(method, prof)
        verify, overhead, steps = [], 0.0, 0
        for ids in prompts:
            g = dec.generate(timed, ids, args.max_new, args.bc)
            verify += g.step_verify_ms
            overhead += 1000 * g.overhead_time
            steps += g.steps
        p, o, v = statistics.fmean(timed.propose_ms), statistics.fmean(timed.observe_ms), statistics.fmean(verify)
        share = (p + o) / (p + o + v + overhead / steps)
        print(f"| {name} | {args.bc} | {steps} | {p:.3f} | {o:.3f} | {v:.1f} | {overhead / steps:.3f} | "
              f"{100 * share:.1f} % |", flush=True)
        if prof:
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(12)
            print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:3000])


if __name__ == "__main__":
    main()
