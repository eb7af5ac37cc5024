"""Per-step overhead of the decoding loop: this checkout's `Decoder` against an older checkout's,
in one process, on the same model, target, prompts and methods (AR and pld), interleaved per prompt.

    python benchmarks/loop_overhead.py --old-src /path/to/older/checkout [--rounds 3] [--tokens 128]

The older loop is loaded from its own file (`specbench_cli/decoding/decoder.py`, or
`specbench_cli/engine/loop.py` in a checkout from before the decoding core had its own folder) on
top of this checkout's draft, drafter, target and verify modules, which kept their interfaces. Prints tok/s per loop and method: the median over rounds of the
tokens of all prompts over their wall time. Run it on quiet cores; say the load with its numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path


def load_old_loop(src: Path):
    """The older checkout's decoding loop as a module: `specbench_cli/decoding/decoder.py`, or in a
    checkout from before the decoding core had its own folder, `specbench_cli/engine/loop.py`,
    whose `specbench_cli.engine.*` / `specbench_cli.engine.targets.*` imports are served by this
    checkout's modules of the same role (their interfaces are the same)."""
    new = src / "specbench_cli" / "decoding" / "decoder.py"
    if new.is_file():
        path = new
    else:
        import importlib

        path = src / "specbench_cli" / "engine" / "loop.py"
        for old, now in (("draft", "decoding.draft"), ("drafter", "decoding.drafter"), ("target", "decoding.target"),
                         ("verify", "decoding.verify"), ("budget", "decoding.budget"),
                         ("targets", "targets"), ("targets.hf", "targets.hf.target")):
            sys.modules.setdefault(f"specbench_cli.engine.{old}", importlib.import_module(f"specbench_cli.{now}"))
        sys.modules["specbench_cli.targets.hf.target"].as_target = sys.modules["specbench_cli.targets"].as_target
    spec = importlib.util.spec_from_file_location("old_specbench_loop", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_specbench_loop"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-src", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import torch

    from specbench_cli import methods, tasks
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn

    torch.set_num_threads(a.threads)
    old = load_old_loop(a.old_src)
    lm = load_model("smollm2-135m", forward="auto")
    eos = stop_token_ids(lm.tokenizer, lm.target)
    prompter = ChatPrompter(lm.tokenizer, "auto")
    qs = tasks.get("mini").load(None)
    by_cat: dict = {}
    for q in qs:
        by_cat.setdefault(q.category, q)
    prompts = [prompter(user_turn(q.turns[0])) for q in list(by_cat.values())[: a.questions]]
    loops = {"old": old.Decoder(lm.target, eos), "new": Decoder(lm.target, eos)}
    ctx = MethodContext(lm.target, lm.tokenizer, budget=10)
    made = {m: methods.get(m).create(ctx) for m in ("ar", "pld")}
    for d in loops.values():  # warm-up
        d.generate(made["ar"], prompts[0], 16, 10)
    tps: dict = {(loop, m): [] for loop in loops for m in made}
    outputs: dict = {}
    for r in range(a.rounds):
        for m, method in made.items():
            tokens = {loop: 0 for loop in loops}
            seconds = {loop: 0.0 for loop in loops}
            for i, p in enumerate(prompts):
                order = list(loops) if (i + r) % 2 == 0 else list(loops)[::-1]
                for loop in order:
                    start = time.perf_counter()
                    g = loops[loop].generate(method, p, a.tokens, 10)
                    seconds[loop] += time.perf_counter() - start
                    tokens[loop] += len(g.output_ids)
                    outputs.setdefault((loop, m, i), g.output_ids)
            for loop in loops:
                tps[(loop, m)].append(tokens[loop] / seconds[loop])
    same = all(outputs[("old", m, i)] == outputs[("new", m, i)] for m in made for i in range(len(prompts)))
    print(f"load {os.getloadavg()[0]:.2f}; {len(prompts)} mini prompts x {a.tokens} tokens, {a.rounds} rounds, "
          f"{a.threads} threads, forward {lm.forward}; identical tokens old vs new: {same}")
    for m in made:
        o, n = statistics.median(tps[("old", m)]), statistics.median(tps[("new", m)])
        print(f"{m:4s} old {o:6.2f} tok/s  new {n:6.2f} tok/s  ({(n / o - 1) * 100:+.1f} %)  "
              f"rounds old {[round(x, 1) for x in tps[('old', m)]]} new {[round(x, 1) for x in tps[('new', m)]]}")


if __name__ == "__main__":
    main()
