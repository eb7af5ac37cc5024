"""FastCoT on Spec-Bench math_reasoning: calibrate the iteration cap, then the paper's Table 1.

    python results/reference/fastcot/fastcot_table.py calibrate --out results/reference/fastcot [--first 10 --n 10]
    python results/reference/fastcot/fastcot_table.py table RUN_DIR [--out FILE.md]

`calibrate` (the paper's stop condition 1, Sec. 4.4): on `--n` math_reasoning questions that
are NOT the evaluated ones (it skips the first `--first`), run CoT (AR to EOS, trigger, answer)
and one uncapped FastCoT pass that snapshots the exact + approximate rationale after every cap
of the grid; answer each snapshot with the same trigger; pick the smallest cap whose accuracy
is at most `--threshold` below CoT's on these questions. Writes calibration.json.

`table` rebuilds the Table-1 analog from a run folder alone (rows of `cot` and `fastcot`):
accuracy (k/n, 95 % Wilson interval), wall time (sum over questions, same process), time saved,
performance loss, and iterations saved by Jacobi hits / total iterations.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specbench_cli.atomic import atomic_write  # replaces a link at the name, never writes through it
from specbench_cli.targets import as_target

GRID = (8, 16, 32, 48, 64, 96, 128, 192)


def _questions(first: int, n: int):
    from specbench_cli import tasks

    qs = [q for q in tasks.get("spec_bench").load() if q.category == "math_reasoning"]
    return qs[first:first + n]


def calibrate(args) -> dict:
    import torch

    from specbench_cli import methods
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext
    from specbench_cli.methods.fastcot import FastCoT
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import encode_chat, set_threads, stop_token_ids, user_turn
    from specbench_cli.scoring.quality import gsm8k_correct

    set_threads(args.threads)
    lm = load_model("smollm2-135m", dtype="float32")
    tok, model = lm.tokenizer, lm.model
    ctx = MethodContext(target=model, tokenizer=tok, budget=args.bc)
    dec = Decoder(as_target(model), stop_token_ids(tok, model))
    ar = methods.get("ar").create(ctx)
    grid = [c for c in GRID if c <= args.max_new_tokens]

    class Probe(FastCoT):
        """Uncapped FastCoT that keeps (exact, approximate) after each iteration count in the grid."""

        def reset(self, prompt_ids):
            super().reset(prompt_ids)
            self.snaps = {}

        def observe(self, result):
            super().observe(result)
            if 1 + self.steps in grid:
                exact = result.state.ids[result.state.prompt_len:]
                approx = []
                for t in self.buf[self.exact:self.hi]:
                    if t in self.eos:
                        break
                    approx.append(t)
                self.snaps[1 + self.steps] = (list(exact), approx if not self.ended else [])

    probe = Probe.create(ctx)
    cot = methods.get("cot").create(ctx)
    trigger = probe.trigger_ids
    per_q = []
    for q in _questions(args.first, args.n):
        prompt = encode_chat(tok, user_turn(q.turns[0]))
        t0 = time.perf_counter()
        g = dec.generate(cot, prompt, args.max_new_tokens, args.bc)
        cot_text = tok.decode(g.output_ids, skip_special_tokens=True)
        gp = dec.generate(probe, prompt, args.max_new_tokens, args.bc)
        final = (gp.output_ids, probe.stats())
        rec = {"question_id": q.id, "cot_correct": gsm8k_correct(cot_text, q.reference[0]),
               "cot_iterations": g.stats["iterations"], "fastcot_uncapped_iterations": final[1]["iterations"],
               "caps": {}, "cot_text": cot_text, "texts": {}}  # texts: rescorable later
        for cap in grid:
            if cap not in probe.snaps:  # finished (EOS) before this cap: the uncapped answer applies
                rec["texts"][cap] = tok.decode(final[0], skip_special_tokens=True)
                rec["caps"][cap] = gsm8k_correct(rec["texts"][cap], q.reference[0])
                continue
            exact, approx = probe.snaps[cap]
            exact = [t for t in exact if t not in probe.eos]
            ans = dec.generate(ar, prompt + exact + approx + trigger, probe.opts.answer_tokens, 1)
            text = tok.decode(exact + approx + trigger + ans.output_ids, skip_special_tokens=True)
            rec["texts"][cap] = text
            rec["caps"][cap] = gsm8k_correct(text, q.reference[0])
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        per_q.append(rec)
        print(json.dumps({k: v for k, v in rec.items() if "text" not in k}), file=sys.stderr, flush=True)
    n = len(per_q)
    cot_acc = sum(bool(r["cot_correct"]) for r in per_q) / n
    acc = {cap: sum(bool(r["caps"][cap]) for r in per_q) / n for cap in grid}
    ok = [cap for cap in grid if cot_acc - acc[cap] <= args.threshold + 1e-9]
    chosen = ok[0] if ok else max(grid)
    doc = {"questions": [r["question_id"] for r in per_q], "n": n, "bc": args.bc, "window": probe.k,
           "threshold": args.threshold, "max_new_tokens": args.max_new_tokens, "threads": torch.get_num_threads(),
           "cot_accuracy": cot_acc, "accuracy_by_cap": acc, "chosen_max_iters": chosen, "per_question": per_q}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "calibration.json", json.dumps(doc, indent=1))
    print(chosen)
    return doc


def table(args) -> str:
    from specbench_cli.scoring.quality import score_row, wilson
    from specbench_cli.store.runfolder import all_rows, load_runs

    rows = [r for r in all_rows(load_runs([Path(args.run_dir)])) if r["status"] == "ok"]
    by = {}
    for r in rows:
        by.setdefault(r["method"], {})[r["question_id"]] = r
    common = sorted(set.intersection(*(set(v) for m, v in by.items() if m in ("cot", "fastcot"))))
    lines = ["| Method | n | Accuracy (95% Wilson) | Wall time | Saved | Time ratio | median t/t_CoT | PL | IS/TI "
             "| exact / approx tokens |",
             "| :--- | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    base = None
    for method in ("ar", "cot", "fastcot"):
        if method not in by:
            continue
        rs = [by[method][q] for q in common]
        k = sum(bool(score_row(r)) for r in rs)
        lo, hi = wilson(k, len(rs))
        wall = sum(r["wall_time"] for r in rs)
        stats = [r.get("method_stats") or {} for r in rs]
        iters = sum(s.get("iterations", r["steps"] + 1) for s, r in zip(stats, rs))
        hits = sum(s.get("jacobi_hits", 0) for s in stats)
        approx = sum(s.get("approx_tokens", 0) for s in stats)
        exact = sum(s.get("exact_tokens", r["new_tokens"]) for s, r in zip(stats, rs))
        acc = k / len(rs)
        ratios = sorted(r["wall_time"] / by["cot"][q]["wall_time"] for q, r in zip(common, rs)) if "cot" in by else []
        median = f"{(ratios[(len(ratios) - 1) // 2] + ratios[len(ratios) // 2]) / 2:.2f}" if ratios else "–"
        if method == "cot":
            base = (wall, acc)
        saved = f"{base[0] - wall:.1f}s" if base and method == "fastcot" else "–"
        ratio = f"{(base[0] - wall) / base[0]:.1%}" if base and method == "fastcot" else "–"
        pl = f"{base[1] - acc:+.1%}" if base and method == "fastcot" else "–"
        label = rs[0]["method_label"] + (" (lossy)" if rs[0].get("lossless") is False else "")
        lines.append(f"| {label} | {len(rs)} | {k}/{len(rs)} = {acc:.0%} [{lo:.0%}, {hi:.0%}] | {wall:.1f}s | "
                     f"{saved} | {ratio} | {median} | {pl} | {hits}/{iters} | {exact} / {approx} |")
    notes = ["", "Accuracy: GSM8K exact match of the final number (docs/metrics.md). Wall time: sum over the "
             "n questions, measured in one process with the methods interleaved per question. Saved, Time ratio "
             "and PL (performance loss, CoT accuracy minus FastCoT's) are against `cot`. IS/TI: iterations "
             "saved by Jacobi hits / total iterations (forwards of the reasoning phase, prefill included). "
             "`ar` is plain AR without the answer trigger."]
    text = "\n".join(lines + notes) + "\n"
    if args.out:
        atomic_write(Path(args.out), text)
    print(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("--out", required=True)
    c.add_argument("--first", type=int, default=10, help="skip the evaluated questions")
    c.add_argument("--n", type=int, default=10)
    c.add_argument("--bc", type=int, default=6)
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--threshold", type=float, default=0.05)
    c.add_argument("--threads", type=int, default=1)
    t = sub.add_parser("table")
    t.add_argument("run_dir")
    t.add_argument("--out")
    args = p.parse_args()
    calibrate(args) if args.cmd == "calibrate" else table(args)


if __name__ == "__main__":
    main()
