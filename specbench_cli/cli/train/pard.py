"""`specbench train pard`: adapt a small draft model into a PARD parallel drafter (mask tokens,
conditional drop; specbench_cli/training/draft_model/pard.py). Every option is checked before the
model loads (bad input: one line, exit 2)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from specbench_cli.cli.train.common import DATA_TEMPLATE, DEVICE, DTYPE, QUIET, THREADS, TRUST


def pard_cmd(
    drafter: str = typer.Option(..., help="Draft model to adapt (a `train drafter subclone` / `scratch` folder or "
                                          "any small model with the target's tokenizer)."),
    data: Path = typer.Option(..., help="Instruction/response JSONL (e.g. `train drafter distill-data` output), or "
                                        "hf:PATH_OR_ID[:CONFIG][:SPLIT]."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the PARD drafter (HF format) + checkpoints."),
    k: int = typer.Option(8, "--k", help="K: tokens predicted per draft forward in training (K-1 mask tokens)."),
    retain: float = typer.Option(0.7, help="Conditional drop: mask group g keeps max(retain^g, --retain-min) "
                                           "of the slots; 1 keeps every slot."),
    retain_min: float = typer.Option(0.2, help="Conditional drop: the least share a mask group keeps."),
    mask_id: Optional[int] = typer.Option(None, help="Mask token id (default: the drafter's `pard_token`, else "
                                                     "an unused embedding row, else a new one)."),
    steps: int = typer.Option(300), batch_size: int = typer.Option(4), lr: float = typer.Option(1e-5),
    weight_decay: float = typer.Option(0.0), warmup: int = typer.Option(10), grad_clip: float = typer.Option(1.0),
    max_len: int = typer.Option(384, help="Max tokens per example (prompt + response; responses are cut)."),
    save_every: int = typer.Option(50), keep: int = typer.Option(2), seed: int = typer.Option(0),
    resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output."),
    force: bool = typer.Option(False, help="Start over in an --output holding an earlier output of this command "
                               "(its checkpoints removed; a folder holding other files is refused even so)."),
    prompt_template: Optional[str] = DATA_TEMPLATE,
    dtype: str = DTYPE, device: str = DEVICE, threads: Optional[int] = THREADS, quiet: bool = QUIET,
    trust_remote_code: bool = TRUST,
):
    """PARD: train a draft model to predict K tokens in one forward from K-1 mask tokens."""
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
    from specbench_cli.training.draft_model.finetune import check_distill_rows
    from specbench_cli.training.draft_model.pard import PardRecipe, train_pard

    set_threads(threads)
    check_data_template(prompt_template)
    check_device(device)
    recipe = PardRecipe(k, retain, retain_min)
    recipe.validate()
    if max_len < 8:
        raise UsageError("--max-len must be >= 8")
    if mask_id is not None and mask_id < 0:
        raise UsageError(f"--mask-id must be >= 0, got {mask_id}")
    cfg = train_config(steps, batch_size, lr, weight_decay, warmup, grad_clip, save_every, keep, seed)
    out = check_output_for_training(output, resume, force, trained_model_output("train pard"))
    rows = load_training_rows(data, "training data file", prompt_template)
    template = check_distill_rows(rows, data, prompt_template)
    t0 = time.time()
    lm = load(drafter, device, dtype, trust_remote_code)
    summary = train_pard(lm.model, lm.tokenizer, rows, out, cfg, recipe, mask_id, max_len,
                         meta={"drafter_init": drafter, "data": str(data), "prompt_template": template},
                         resume=resume, progress=not quiet)
    print_table(f"pard K={k} -> {out}", {"steps": summary["steps_done"], "mask token": summary["mask_id"],
                                         "training seconds": summary["wall_seconds_this_run"],
                                         "total seconds": round(time.time() - t0, 1),
                                         "train examples": summary["train_examples"]})


def register(app: typer.Typer) -> None:
    app.command("pard")(pard_cmd)
