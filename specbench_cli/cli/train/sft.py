"""`specbench train sft` and `specbench train msn` (registered on the `train` group by cli.py).

Both take the same options (same recipe); `msn` adds the three noise options. Every option is
checked before the model loads (bad input: one line, exit 2).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from specbench_cli.cli.train.common import DATA_TEMPLATE
from specbench_cli.models.load import DEFAULT_MODEL

_DATA = typer.Option(..., help="Instruction/response JSONL (`train drafter distill-data` output: the "
                               "target's own answers), or hf:PATH_OR_ID[:CONFIG][:SPLIT] (instruction/response or "
                               "ShareGPT conversations).")
_OUT = typer.Option(..., "--output", "-o", help="Folder for the fine-tuned model (HF format) + checkpoints.")
_TARGET = typer.Option(DEFAULT_MODEL, "--target", "-m", help="Model to fine-tune: alias, .gguf, HF folder.")
_LORA_RANK = typer.Option(None, help="Train LoRA adapters of this rank (peft; `pip install 'specbench-cli[lora]'`) "
                                     "instead of all weights; the saved folder has them merged.")
_LORA_ALPHA = typer.Option(None, help="LoRA scale numerator (W + alpha/r BA); default 2 x --lora-rank.")
_DTYPE = typer.Option("float32", help="Compute dtype: float32 | bfloat16 (autocast; weights stay float32). bfloat16 is "
                              "only faster on CPUs with native bf16 (AVX512-BF16/AMX) or GPUs.")


def sft_cmd(
    data: Path = _DATA, output: Path = _OUT, target: str = _TARGET,
    steps: int = typer.Option(300), batch_size: int = typer.Option(8), lr: float = typer.Option(1e-5),
    weight_decay: float = typer.Option(0.0), warmup: int = typer.Option(10), grad_clip: float = typer.Option(1.0),
    max_len: int = typer.Option(384, help="Max tokens per example (prompt + response; responses are cut)."),
    holdout: float = typer.Option(0.05, help="Share of instructions held out for the before/after probe."),
    save_every: int = typer.Option(25), keep: int = typer.Option(1), seed: int = typer.Option(0),
    resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output."),
    force: bool = typer.Option(False, help="Start over in an --output holding an earlier output of this command "
                               "(its checkpoints removed; a folder holding other files is refused even so)."),
    lora_rank: Optional[int] = _LORA_RANK, lora_alpha: Optional[float] = _LORA_ALPHA,
    dtype: str = _DTYPE, device: str = typer.Option("cpu", help="cpu | cuda | mps."),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    prompt_template: Optional[str] = DATA_TEMPLATE,
):
    """Supervised fine-tuning (all weights) on instruction/response JSONL: the MSN paper's baseline."""
    _run(locals(), None)


def msn_cmd(
    data: Path = _DATA, output: Path = _OUT, target: str = _TARGET,
    noise_length: int = typer.Option(4, help="L: response tokens replaced by noise in each sample's input."),
    noise: str = typer.Option("ahead", help="ahead (tokens drawn from earlier in the sequence) | random."),
    noise_position: str = typer.Option("random", help="random | loss (lowest-loss segment, paper App. A)."),
    steps: int = typer.Option(300), batch_size: int = typer.Option(8), lr: float = typer.Option(1e-5),
    weight_decay: float = typer.Option(0.0), warmup: int = typer.Option(10), grad_clip: float = typer.Option(1.0),
    max_len: int = typer.Option(384, help="Max tokens per example (prompt + response; responses are cut)."),
    holdout: float = typer.Option(0.05, help="Share of instructions held out for the before/after probe."),
    save_every: int = typer.Option(25), keep: int = typer.Option(1), seed: int = typer.Option(0),
    resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output."),
    force: bool = typer.Option(False, help="Start over in an --output holding an earlier output of this command "
                               "(its checkpoints removed; a folder holding other files is refused even so)."),
    lora_rank: Optional[int] = _LORA_RANK, lora_alpha: Optional[float] = _LORA_ALPHA,
    dtype: str = _DTYPE, device: str = typer.Option("cpu", help="cpu | cuda | mps."),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    prompt_template: Optional[str] = DATA_TEMPLATE,
):
    """Make Some Noise: the sft recipe with one response segment per sample replaced by noise in the
    input (labels stay gold), so the model learns to decode from noisy drafts (Jacobi)."""
    from specbench_cli.training.sft.noise import NoiseConfig

    args = locals()
    _run(args, NoiseConfig(noise_length, noise, noise_position))


def _run(a: dict, noise) -> None:
    from specbench_cli.cli.train.common import (
        check_data_template,
        check_output_for_training,
        load,
        print_table,
        train_config,
    )
    from specbench_cli.models.load import check_device
    from specbench_cli.models.prompting import set_threads
    from specbench_cli.training.common.loop import trained_model_output
    from specbench_cli.training.draft_model.distill_data import load_training_rows
    from specbench_cli.training.draft_model.finetune import check_distill_rows, split_rows
    from specbench_cli.training.sft.lora import ADAPTER_FILE, check_lora
    from specbench_cli.training.sft.train import check_autocast, train_sft

    set_threads(a["threads"])
    check_data_template(a["prompt_template"])
    check_device(a["device"])
    check_autocast(a["dtype"])
    check_lora(a["lora_rank"], a["lora_alpha"])
    if noise is not None:
        noise.validate()
    if a["max_len"] < 8:
        from specbench_cli.errors import UsageError

        raise UsageError("--max-len must be >= 8")
    split_rows([], a["holdout"])  # validates --holdout
    cfg = train_config(a["steps"], a["batch_size"], a["lr"], a["weight_decay"], a["warmup"], a["grad_clip"],
                        a["save_every"], a["keep"], a["seed"])
    spec = trained_model_output("train sft" if noise is None else "train msn", (ADAPTER_FILE,))
    out = check_output_for_training(a["output"], a["resume"], a["force"], spec)
    rows = load_training_rows(a["data"], "training data file", a["prompt_template"])
    template = check_distill_rows(rows, a["data"], a["prompt_template"])
    t0 = time.time()
    lm = load(a["target"], a["device"], "float32")
    summary = train_sft(lm.model, lm.tokenizer, rows, out, cfg, noise, a["max_len"], a["holdout"], a["dtype"],
                        meta={"init": a["target"], "data": str(a["data"]), "prompt_template": template}, resume=a["resume"],
                        progress=not a["quiet"], lora_rank=a["lora_rank"], lora_alpha=a["lora_alpha"])
    table = {"steps": summary["steps_done"], "training seconds": summary["wall_seconds_this_run"],
             "total seconds": round(time.time() - t0, 1), "train examples": summary["train_examples"]}
    if summary.get("lora"):
        table["LoRA trainable params"] = summary["lora"]["trainable_params"]
    for when in ("eval_before", "eval_after"):
        table.update({f"{when} {k}": v for k, v in summary.get(when, {}).items()})
    print_table(f"{summary['kind']} -> {out}", table)


def register(app: typer.Typer) -> None:
    app.command("sft")(sft_cmd)
    app.command("msn")(msn_cmd)
