"""`specbench train space` (registered on the `train` group): SPACE's semi-autoregressive
fine-tuning of the target itself (training/space/train.py). Every option is checked before the
model loads (bad input: one line, exit 2)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from specbench_cli.cli.train.common import DATA_TEMPLATE, DEVICE, QUIET, THREADS
from specbench_cli.models.load import DEFAULT_MODEL


def space_cmd(
    data: Path = typer.Option(..., help="Instruction/response JSONL (`train drafter distill-data` output), or "
                                        "hf:PATH_OR_ID[:CONFIG][:SPLIT]."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the fine-tuned model (HF format) + "
                                                             "checkpoints; use it as `specbench run --model FOLDER`."),
    target: str = typer.Option(DEFAULT_MODEL, "--target", "-m", help="Model to fine-tune: alias, HF folder, hub id."),
    k: int = typer.Option(5, help="Mask tokens per masked sample: the tokens the model learns to draft per step."),
    mask_prob: float = typer.Option(0.5, help="Share of samples that get masks (the others: plain SFT)."),
    mask_loss_weight: float = typer.Option(1.0, help="Weight of the mask positions' loss against the AR positions'."),
    steps: int = typer.Option(300), batch_size: int = typer.Option(8), lr: float = typer.Option(1e-5),
    weight_decay: float = typer.Option(0.0), warmup: int = typer.Option(10), grad_clip: float = typer.Option(1.0),
    max_len: int = typer.Option(384, help="Max tokens per example (prompt + response; responses are cut)."),
    holdout: float = typer.Option(0.05, help="Share of instructions held out for the before/after probe."),
    save_every: int = typer.Option(25), keep: int = typer.Option(1), seed: int = typer.Option(0),
    resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output."),
    force: bool = typer.Option(False, help="Start over in an --output holding an earlier output of this command "
                               "(its checkpoints removed; a folder holding other files is refused even so)."),
    dtype: str = typer.Option("float32", help="Compute dtype: float32 | bfloat16 (autocast; weights stay float32)."),
    device: str = DEVICE, threads: Optional[int] = THREADS, quiet: bool = QUIET,
    prompt_template: Optional[str] = DATA_TEMPLATE,
):
    """SPACE: fine-tune the target with [MASK] tokens so that it drafts k tokens in its own verify forward."""
    from specbench_cli.cli.train.common import (
        check_data_template,
        check_output_for_training,
        load,
        print_table,
        train_config,
    )
    from specbench_cli.errors import UsageError
    from specbench_cli.models.load import check_device
    from specbench_cli.models.prompting import set_threads
    from specbench_cli.training.common.loop import trained_model_output
    from specbench_cli.training.draft_model.distill_data import load_training_rows
    from specbench_cli.training.draft_model.finetune import check_distill_rows, split_rows
    from specbench_cli.training.sft.train import check_autocast
    from specbench_cli.training.space.train import SpaceConfig, train_space

    set_threads(threads)
    check_data_template(prompt_template)
    check_device(device)
    check_autocast(dtype)
    space = SpaceConfig(k, mask_prob, mask_loss_weight)
    space.validate()
    if max_len < k + 8:
        raise UsageError(f"--max-len must be >= k + 8 = {k + 8}")
    split_rows([], holdout)  # validates --holdout
    cfg = train_config(steps, batch_size, lr, weight_decay, warmup, grad_clip, save_every, keep, seed)
    out = check_output_for_training(output, resume, force, trained_model_output("train space"))
    rows = load_training_rows(data, "training data file", prompt_template)
    template = check_distill_rows(rows, data, prompt_template)
    t0 = time.time()
    lm = load(target, device, "float32")
    summary = train_space(lm.model, lm.tokenizer, rows, out, cfg, space, max_len, holdout, dtype,
                          meta={"init": target, "data": str(data), "prompt_template": template}, resume=resume,
                          progress=not quiet)
    table = {"steps": summary["steps_done"], "training seconds": summary["wall_seconds_this_run"],
             "total seconds": round(time.time() - t0, 1), "train examples": summary["train_examples"],
             "mask id": summary.get("mask_id")}
    for when in ("eval_before", "eval_after"):
        table.update({f"{when} {key}": value for key, value in summary.get(when, {}).items()})
    print_table(f"space k={k} -> {out}", table)


def register(app: typer.Typer) -> None:
    app.command("space")(space_cmd)
