"""AR decoding per `--forward` flavour in one process, timed by wall clock and by CPU time.

    python results/reference/forward/forward_ar_cpu.py --forwards sdpa,lean --threads 1 \
        -o results/reference/forward/ar-cpu-float32-t1.json

On a shared machine wall time measures the neighbours as much as the code; with one thread,
the CPU time of the decoding thread is the work done. Per question (the first turn of the
first `--limit` Spec-Bench questions of each category, the chat template applied as in
`specbench run`) every flavour decodes up to `--max-new-tokens` greedily through the engine's
AR path (`Decoder.generate`), in a rotating order, after an untimed-for-tok/s prefill-only
generation whose CPU time is subtracted for the decode-only rate. Reported: tok/s by wall and
by CPU time (prefill included, as `specbench run` counts it), decode-only tok/s by CPU time
(steps / CPU s), and whether each flavour's tokens equal the first flavour's.
"""

from __future__ import annotations

import sys

import argparse
import os
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_json import write_result  # noqa: E402
from specbench_cli.targets import as_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--forwards", default="sdpa,lean")
    ap.add_argument("--limit", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--questions", default=os.environ.get("SPECBENCH_QUESTIONS"))
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    import torch

    from specbench_cli import methods, tasks
    from specbench_cli.tasks.base import select as select_questions
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import encode_chat, stop_token_ids, user_turn

    torch.set_num_threads(args.threads)
    flavours = args.forwards.split(",")
    lms = {f: load_model(args.model, dtype=args.dtype, forward=f) for f in flavours}
    tok = lms[flavours[0]].tokenizer
    questions = select_questions(tasks.get("spec_bench").load(args.questions), None, args.limit, None)
    prompts = [encode_chat(tok, user_turn(q.turns[0])) for q in questions]
    decoders = {f: Decoder(as_target(lm.model), stop_token_ids(tok, lm.model)) for f, lm in lms.items()}
    ar = {f: methods.get("ar").create(MethodContext(lm.model, tok, budget=1)) for f, lm in lms.items()}
    acc = {f: {"tokens": 0, "wall": 0.0, "cpu": 0.0, "prefill_wall": 0.0, "prefill_cpu": 0.0, "steps": 0, "verify": 0.0}
           for f in flavours}
    same = {f: 0 for f in flavours}
    load_before = os.getloadavg()[0]
    for f in flavours:  # untimed warm-up
        decoders[f].generate(ar[f], prompts[0], 8, 1)
    for i, prompt in enumerate(prompts):
        outs = {}
        for f in flavours[i % len(flavours):] + flavours[:i % len(flavours)]:
            c = time.thread_time()
            decoders[f].generate(ar[f], prompt, 1, 1)  # prefill only: its CPU time, to split it off
            c1 = time.thread_time()
            g = decoders[f].generate(ar[f], prompt, args.max_new_tokens, 1)
            a = acc[f]
            a["prefill_cpu"] += c1 - c
            a["cpu"] += time.thread_time() - c1
            a["tokens"] += len(g.output_ids)
            a["wall"] += g.wall_time
            a["prefill_wall"] += g.prefill_time
            a["steps"] += g.steps
            a["verify"] += g.verify_time
            outs[f] = g.output_ids
        for f in flavours:
            same[f] += outs[f] == outs[flavours[0]]
    res = {"model": args.model, "dtype": args.dtype, "threads": args.threads, "questions": len(prompts),
           "max_new_tokens": args.max_new_tokens, "torch": torch.__version__,
           "loadavg_before": round(load_before, 2), "loadavg_after": round(os.getloadavg()[0], 2), "by_forward": {}}
    for f, a in acc.items():
        res["by_forward"][f] = {
            "tokens": a["tokens"], "tok_per_s_wall": round(a["tokens"] / a["wall"], 2),
            "tok_per_s_cpu": round(a["tokens"] / a["cpu"], 2),
            "decode_ms_per_step_wall": round(1000 * a["verify"] / a["steps"], 1),
            # decode only: CPU of the whole generation minus that of a prefill-only generation of the same prompt
            "decode_tok_per_s_cpu": round(a["steps"] / (a["cpu"] - a["prefill_cpu"]), 2),
            "prefill_s_wall": round(a["prefill_wall"], 2),
            "same_tokens_as_" + flavours[0]: f"{same[f]}/{len(prompts)}"}
    text = write_result(res, args.out)
    print(text)


if __name__ == "__main__":
    main()
