"""Time one `train sft|msn` optimisation step on this CPU: full fine-tuning vs LoRA, float32 vs
bfloat16 autocast, on real batches of the self-distillation data (same code path as sft.py:
noise, batch_loss, backward, clip, AdamW).

    python results/reference/msn/msn_step_time.py --data results/checkpoints/heads/data/selfdistill.jsonl \
        --batch-size 8 --max-len 256 --steps 4 --threads 1 -o results/reference/msn-training/step_time.json

Prints and writes, per configuration, the median seconds of the timed steps (the first step is a
warm-up and not counted) and the machine's load average before and after, since other jobs
share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time


def time_config(lm, rows, lora_rank, autocast, args) -> dict:
    import torch

    from specbench_cli.training.draft_model.distill_data import stop_token_ids
    from specbench_cli.training.draft_model.finetune import batch_indices, build_examples, collate
    from specbench_cli.training.sft.noise import NoiseConfig, apply_noise
    from specbench_cli.training.sft.train import _autocast, batch_loss, noise_generator
    from specbench_cli.training.sft.lora import wrap

    model = lm.model
    if lora_rank:
        model = wrap(model, lora_rank)
    examples = build_examples(rows, lm.tokenizer, model, args.max_len)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else stop_token_ids(lm.tokenizer, model)[0]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    model.train()
    times, tokens = [], []
    for step in range(args.steps + 1):
        batch = [examples[i] for i in batch_indices(len(examples), args.batch_size, step, 0)]
        ids, att, mask = collate(batch, pad)
        t0 = time.perf_counter()
        with _autocast(autocast, "cpu"):
            noisy, nmask = apply_noise(ids, batch, NoiseConfig(4), model.config.vocab_size, noise_generator(0, step))
            loss, _ = batch_loss(model, ids, att, mask, nmask, noisy)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step:  # step 0 is warm-up
            times.append(time.perf_counter() - t0)
            tokens.append(int(att.sum()))
    return {"lora_rank": lora_rank, "autocast": autocast, "median_step_s": round(statistics.median(times), 3),
            "step_s": [round(t, 3) for t in times], "tokens_per_batch": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    import torch

    from specbench_cli.models.load import load_model

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in open(args.data) if line.strip()]
    results = []
    for lora in (0, args.lora_rank):
        for autocast in ("float32", "bfloat16"):
            load_before = os.getloadavg()
            lm = load_model(args.model)  # fresh weights per configuration
            r = time_config(lm, rows, lora, autocast, args)
            r["load_avg_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
            print(json.dumps(r), flush=True)
            results.append(r)
    out = {"machine": platform.processor() or platform.machine(), "cpu_capability":
           torch.backends.cpu.get_cpu_capability(), "threads": args.threads, "batch_size": args.batch_size,
           "max_len": args.max_len, "model": args.model, "data": os.path.basename(args.data), "results": results}
    if args.output:
        from specbench_cli.atomic import atomic_write  # replaces a link at the name, never writes through it

        atomic_write(args.output, json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
