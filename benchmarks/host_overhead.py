"""The decoding loop's own cost per step, with a target that costs nothing: per method, batch size
and block complexity, the host time per step split into its parts, and the device
synchronisations per step.

    python benchmarks/host_overhead.py [--budget 10] [--batch 1 8] [--tokens 128] [--prompts 8]
                                       [--rounds 3] [--vocab 1024] [--methods ar pld ...] [--json FILE]

The target is `zero-cost` (targets/zero_cost.py): its forward returns logits it holds, and
it counts every time the host waits for its outputs, so a step costs only specbench's own work
and the count is the same on a CPU as on a GPU. Every registered method it can serve is run
(logits only: a method that needs hidden states, embeddings, heads, a draft model, a datastore or
a mask token is listed as skipped, with why), each at the fixed block complexity and, for the
methods that take one, with an adaptive budget (`NAME@adaptive`: learned on one pass, then frozen)
under the same ceiling. Prompts are synthetic token ids with repeated spans; the answers copy
spans of them, so drafters that look up the context are accepted part of the time.

Each configuration is decoded `--rounds` times with the count off (plain tensors: nothing is timed
through the counting) and once with it on; both must give the same tokens, and every lossless
method AR's. Columns (per *batch step*, i.e. one target forward over every live sequence; the
medians over rounds):

  tok/step  tokens each sequence gained per step (the mean accepted length + 1)
  host ms   the step's wall time less the target's forward: what specbench itself costs
  propose   drafters' `propose` (every live sequence's), budget excluded
  budget    the adaptive budget's choice and its bookkeeping (`choose` + `observe`); 0 at a fixed BC
  accept    the verdicts (which nodes the target accepted, the bonus token), after the step's one
            transfer of every row's argmax and of the top-k drafters read (`host_topk`); on a
            CPU that includes computing them, on a GPU launching them and waiting for the device
  commit    `Target.commit` (the zero-cost target's own is a list append: this is the loop's call)
  observe   drafters' `observe`, budget excluded
  other     the rest: building each step's state, results and records, rows leaving
  forward   the zero-cost target's own forward (not specbench's cost; for reference)
  cpu       the process's CPU time per step for the whole decode, the target's forward and the
            prefills included: on a loaded machine far steadier than the wall-clock parts (which
            then include waiting for a core), so compare before/after with it there
  syncs     device synchronisations per step (from the counting pass; the prefill's first-token
            reads excluded), and in brackets how many of them the drafters made
  =AR       every answer is the target's own (what greedy AR decodes), in both passes

The forward's logits are `--vocab` wide (default 1024): on a GPU the verdict's argmax over the
vocabulary is device work, so a narrow vocabulary keeps that work out of the host time measured
on a CPU. Run it on quiet cores with `--threads 1` (the default): the loop is single-threaded,
and torch's thread pool under load adds milliseconds of contention to every small tensor op.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Optional
from specbench_cli.targets import as_target

# what a method needs that a target of logits alone cannot give, by `requires` entry
NOT_ZERO_COST = {
    "heads": "needs trained heads, which read the target's hidden states",
    "draft_model": "runs a draft model's forwards of its own (not zero-cost)",
    "datastore": "needs a datastore built from a corpus with a tokenizer",
    "mask_token": "needs a model trained with a mask token",
}


def served(target) -> tuple[list[str], dict[str, str]]:
    """(the registered methods the zero-cost target can serve, the others with why not)."""
    from specbench_cli import methods
    from specbench_cli.decoding.target import missing_capabilities

    ok, skipped = [], {}
    for name in methods.names():
        cls = methods.get(name)
        needs = list(getattr(cls, "needs", ()))
        if getattr(cls, "needs_hidden_states", False) and "hidden_states" not in needs:
            needs.append("hidden_states")
        missing = missing_capabilities(needs, target.capabilities)
        reasons = [NOT_ZERO_COST.get(r, f"requires {r}") for r in getattr(cls, "requires", ())]
        if missing:
            reasons.append("needs " + ", ".join(missing) + " (the zero-cost target gives logits only)")
        if not getattr(cls, "lossless", True):
            reasons.append("lossy (it changes the answer on purpose; not a loop-overhead case)")
        if reasons:
            skipped[name] = "; ".join(reasons)
        else:
            ok.append(name)
    return ok, skipped


def prompts_for(n: int, length: int, vocab: int) -> list[list[int]]:
    """`n` synthetic prompts of `length` token ids with repeated spans (the zero-cost target's own
    answer generator, seeded per prompt)."""
    from specbench_cli.targets.zero_cost import answer_for

    return [answer_for([1000 + i], length, vocab, seed=7) for i in range(n)]


class TimedPolicy:
    """An adaptive budget whose `choose` and `observe` are timed (the loop counts them in
    propose and observe; the benchmark moves them to their own column)."""

    def __init__(self, policy) -> None:
        self.policy, self.choosing, self.observing = policy, 0.0, 0.0

    def begin(self) -> None:
        self.policy.begin()

    def choose(self, draft):
        t = time.perf_counter()
        out = self.policy.choose(draft)
        self.choosing += time.perf_counter() - t
        return out

    def observe(self, *args, **kwargs):
        t = time.perf_counter()
        self.policy.observe(*args, **kwargs)
        self.observing += time.perf_counter() - t


class SyncSpy:
    """Counts the syncs a drafter's `propose`/`observe` (and its budget) make, by wrapping them on
    the instance; `first` is the meter's count at the batch's first propose (the prefill's end)."""

    def __init__(self, meter) -> None:
        self.meter, self.inside, self.first = meter, 0, None

    def wrap(self, drafter) -> None:
        for name in ("propose", "observe"):
            inner = getattr(drafter, name)

            def call(*args, _inner=inner, _name=name):
                before = self.meter.count
                if _name == "propose" and self.first is None:
                    self.first = before
                out = _inner(*args)
                self.inside += self.meter.count - before
                return out
            setattr(drafter, name, call)


def make_drafters(name: str, target, budget: int, batch: int, adaptive: Optional[dict]) -> list:
    from specbench_cli import methods
    from specbench_cli.methods.core.method import MethodContext

    out = []
    for _ in range(batch):
        d = methods.get(name).create(MethodContext(target, None, budget=budget))
        if adaptive is not None:  # the budget the loop is handed for this drafter's sequence
            d.ctx = dataclasses.replace(d.ctx, adaptive=TimedPolicy(policy_from(adaptive)))
        out.append(d)
    return out


def policy_from(record: dict):
    from specbench_cli.decoding.budget import AcceptanceTable, AdaptiveBudget

    return AdaptiveBudget(AcceptanceTable.from_dict(record["table"]), record["step_ms"], record["draft_ms"],
                          online=8.0, history=True, hindsight=True)


def learn_policy(name: str, target, prompts, budget: int, tokens: int) -> dict:
    """An adaptive budget for `name` under ceiling `budget`: the acceptance table learned from
    whole drafts on the prompts, a flat GPU-like cost curve (a forward of q tokens costs 5 ms +
    0.02 ms per token), no drafting cost."""
    from specbench_cli import methods
    from specbench_cli.decoding.budget import AcceptanceTable, AdaptiveBudget
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext

    step_ms = [5.0 + 0.02 * q for q in range(1, budget + 1)]
    d = methods.get(name).create(MethodContext(target, None, budget=budget))
    learning = AdaptiveBudget(AcceptanceTable(), step_ms, learning=True, history=True)
    dec = Decoder(as_target(target), set())
    for p in prompts:
        dec.generate(d, p, tokens, budget, policy=learning)
    return {"table": learning.table.to_dict(), "step_ms": step_ms, "draft_ms": 0.0}


def decode_pass(target, drafters: list, prompts: list, tokens: int, budget: int, spy: Optional[SyncSpy] = None
                ) -> dict:
    """Decode every prompt, `len(drafters)` at a time; the parts summed over batch steps."""
    from specbench_cli.decoding.decoder import Decoder

    dec = Decoder(as_target(target), set())
    b = len(drafters)
    total = {"steps": 0, "seq_steps": 0, "tokens": 0, "decode": 0.0, "forward": 0.0, "accept": 0.0, "commit": 0.0,
             "propose": 0.0, "observe": 0.0, "choose": 0.0, "budget_observe": 0.0, "cpu": 0.0, "syncs": 0,
             "drafter_syncs": 0, "outputs": []}
    for i in range(0, len(prompts), b):
        chunk = prompts[i:i + b]
        ds = drafters[:len(chunk)]
        adaptive = [d.ctx.adaptive for d in ds]
        policies = [p for p in adaptive if p is not None]
        choosing, observing = sum(p.choosing for p in policies), sum(p.observing for p in policies)
        if spy is not None:
            spy.first, inside, start = None, spy.inside, target.meter.count
        cpu = time.process_time()
        gens = dec.generate_batch(ds, chunk, [tokens] * len(chunk), budget, policies=adaptive)
        total["cpu"] += time.process_time() - cpu
        longest = max(gens, key=lambda g: g.steps)  # live at every batch step: the shared parts' totals
        total["steps"] += longest.steps
        total["seq_steps"] += sum(g.steps for g in gens)
        total["tokens"] += sum(len(g.output_ids) for g in gens)
        total["decode"] += max(g.wall_time for g in gens) - longest.prefill_time
        for part in ("forward", "accept", "commit"):
            total[part] += getattr(longest, f"{part}_time")
        total["propose"] += sum(g.propose_time for g in gens)
        total["observe"] += sum(g.observe_time for g in gens)
        total["choose"] += sum(p.choosing for p in policies) - choosing
        total["budget_observe"] += sum(p.observing for p in policies) - observing
        total["outputs"] += [g.output_ids for g in gens]
        if spy is not None:
            total["syncs"] += target.meter.count - (spy.first if spy.first is not None else start)
            total["drafter_syncs"] += spy.inside - inside
    return total


def per_step(t: dict) -> dict:
    """Milliseconds per batch step of each part (budget moved out of propose and observe)."""
    steps = max(t["steps"], 1)
    ms = {k: 1000 * t[k] / steps for k in ("decode", "forward", "accept", "commit", "propose", "observe", "choose",
                                           "budget_observe")}
    # the loop clocks the budget's choice within propose and its bookkeeping within observe
    ms["propose"] -= ms.pop("choose")
    ms["observe"] -= ms["budget_observe"]
    ms["budget"] = 1000 * (t["choose"] + t["budget_observe"]) / steps
    ms["cpu"] = 1000 * t["cpu"] / steps
    del ms["budget_observe"]
    ms["host"] = ms["decode"] - ms["forward"]
    ms["other"] = ms["host"] - ms["accept"] - ms["commit"] - ms["propose"] - ms["observe"] - ms["budget"]
    return ms


def run_config(name: str, spec: str, target_timed, target_counted, prompts, tokens: int, budget: int, batch: int,
               rounds: int, adaptive: Optional[dict]) -> dict:
    drafters = make_drafters(name, target_timed, budget, batch, adaptive)
    decode_pass(target_timed, drafters, prompts[:batch], min(16, tokens), budget)  # warm-up
    for d in drafters:
        d.forget()
    runs = []
    outputs = None
    for _ in range(rounds):
        t = decode_pass(target_timed, drafters, prompts, tokens, budget)
        for d in drafters:
            d.forget()
        runs.append((per_step(t), t))
        outputs = t["outputs"]
    counted = make_drafters(name, target_counted, budget, batch, adaptive)
    spy = SyncSpy(target_counted.meter)
    for d in counted:
        spy.wrap(d)
    c = decode_pass(target_counted, counted, prompts, tokens, budget, spy)
    steps = max(c["steps"], 1)
    ms = {k: statistics.median(r[0][k] for r in runs) for k in runs[0][0]}
    t0 = runs[0][1]
    return {"method": spec, "batch": batch, "budget": budget, "steps": t0["steps"],
            "tokens_per_step": round(t0["tokens"] / max(t0["seq_steps"], 1), 3),
            "ms": {k: round(v, 4) for k, v in ms.items()},
            "syncs_per_step": round(c["syncs"] / steps, 3), "drafter_syncs_per_step": round(c["drafter_syncs"] / steps, 3),
            "outputs": outputs, "counted_outputs": c["outputs"]}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=10)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=None, help="default: every method the target serves")
    ap.add_argument("--no-adaptive", action="store_true", help="skip the NAME@adaptive rows")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = ap.parse_args(argv)

    import torch

    from specbench_cli import methods
    from specbench_cli.targets.zero_cost import ZeroCostTarget, answer_for

    torch.set_num_threads(a.threads)
    print(HEADER)
    timed, counted = ZeroCostTarget(a.vocab, count=False), ZeroCostTarget(a.vocab, count=True)
    ok, skipped = served(timed)
    names = a.methods or ok
    prompts = prompts_for(a.prompts, a.prompt_len, a.vocab)
    answers = [answer_for(p, a.tokens, a.vocab) for p in prompts]  # what greedy AR decodes (the target's answer)
    rows = []
    for name in names:
        specs = [(name, None)]
        if not a.no_adaptive and getattr(methods.get(name), "adaptive_budget", False):
            specs.append((f"{name}@adaptive", learn_policy(name, timed, prompts[:2], a.budget, a.tokens)))
        for spec, adaptive in specs:
            for batch in a.batch:
                row = run_config(name, spec, timed, counted, prompts, a.tokens, a.budget, batch, a.rounds, adaptive)
                row["same_counted"] = row["outputs"] == row["counted_outputs"]
                row["equals_ar"] = row["outputs"] == answers
                del row["outputs"], row["counted_outputs"]
                rows.append(row)
                print(line(row), flush=True)
    print(f"\nload {os.getloadavg()[0]:.2f}; {a.prompts} prompts x {a.tokens} tokens, BC {a.budget}, vocab {a.vocab}, "
          f"{a.threads} thread(s), {a.rounds} rounds (medians), torch {torch.__version__}, python {sys.version.split()[0]}")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "skipped": skipped, "load": os.getloadavg()[0]}, indent=1) + "\n")
    return 0


HEADER = ("| method | B | tok/step | host ms | propose | budget | accept | commit | observe | other | forward | cpu "
          "| syncs (drafters) | =AR |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")


def line(row: dict) -> str:
    ms = row["ms"]
    same = "yes" if row["equals_ar"] and row["same_counted"] else "NO"
    cells = [row["method"], str(row["batch"]), f"{row['tokens_per_step']:.2f}"]
    cells += [f"{ms[k]:.3f}" for k in ("host", "propose", "budget", "accept", "commit", "observe", "other", "forward",
                                       "cpu")]
    cells += [f"{row['syncs_per_step']:.2f} ({row['drafter_syncs_per_step']:.2f})", same]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
