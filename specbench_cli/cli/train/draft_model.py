"""`specbench train drafter ...`: build, distil and evaluate draft models.

Mounted by the main app as `app.add_typer(train_app, name="train")`. `drafter` is a Typer
sub-group (one subcommand per pipeline stage, each with only the options it needs) rather than
one command with a --mode switch, so `--help` of every stage lists only its own options.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from specbench_cli.cli.train.common import (
    DATA_TEMPLATE,
    DEVICE,
    DTYPE,
    QUIET,
    TARGET,
    THREADS,
    TRUST,
    check_data_template,
    check_output_for_training,
    load,
    print_table,
    train_config,
)
from specbench_cli.errors import UsageError

drafter_app = typer.Typer(
    help="Draft models for speculative sampling (Goel et al. 2024 pipeline): subclone or scratch -> "
         "distill-data -> finetune (kld | tvd | tvd++) -> evaluate.",
    no_args_is_help=True)


@drafter_app.command("subclone")
def subclone_cmd(
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the drafter (HF format)."),
    target: str = TARGET,
    layers: int = typer.Option(4, help="Keep the target's first K decoder layers."),
    narrow_ffn: float = typer.Option(1.0, help="Keep this fraction of MLP channels (by weight norm); 1 = all."),
    dtype: str = DTYPE,
    force: bool = typer.Option(False, help="Replace a subclone already in --output (a folder holding other files "
                               "is refused even so)."),
    trust_remote_code: bool = TRUST,
):
    """Cut a drafter out of the target: embeddings + first K layers + final norm + lm_head."""
    from specbench_cli.training.common.io import check_new_output, save_model_folder_staged
    from specbench_cli.training.draft_model.subclone import subclone, subclone_meta

    out = check_new_output(output, force)  # an earlier subclone's files are replaced when the new one is written
    t0 = time.time()
    lm = load(target, "cpu", dtype, trust_remote_code)
    draft = subclone(lm.model, layers, narrow_ffn)
    meta = subclone_meta(target, lm.resolved, lm.model, draft, narrow_ffn)
    save_model_folder_staged(draft, lm.tokenizer, out, meta)
    print_table(f"subclone -> {out}", {"layers kept": f"{layers} of {meta['target_layers']}",
                                        "intermediate": meta["intermediate_size"], "params": meta["params"],
                                        "target params": meta["target_params"], "seconds": time.time() - t0})


@drafter_app.command("scratch")
def scratch_cmd(
    text: Path = typer.Option(..., help="Plain UTF-8 text file to pretrain on."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the drafter (HF format)."),
    tokenizer_from: str = typer.Option("smollm2-135m", "--tokenizer-from", "--target", "-m",
                                       help="Model whose tokenizer and vocabulary the drafter uses (the target)."),
    layers: int = typer.Option(4), hidden: int = typer.Option(256), heads: int = typer.Option(4),
    kv_heads: Optional[int] = typer.Option(None, help="Key/value heads (default: --heads)."),
    intermediate: Optional[int] = typer.Option(None, help="MLP width (default ~8/3 hidden)."),
    seq_len: int = typer.Option(256, help="Tokens per training chunk."),
    steps: int = typer.Option(500), batch_size: int = typer.Option(8), lr: float = typer.Option(1e-3),
    weight_decay: float = typer.Option(0.1), warmup: int = typer.Option(20), grad_clip: float = typer.Option(1.0),
    save_every: int = typer.Option(100), keep: int = typer.Option(2), seed: int = typer.Option(0),
    resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output."),
    force: bool = typer.Option(False, help="Start over in an --output holding an earlier output of this command "
                               "(its checkpoints removed; a folder holding other files is refused even so)."),
    device: str = DEVICE, threads: Optional[int] = THREADS, quiet: bool = QUIET,
    trust_remote_code: bool = TRUST,
):
    """Build a small Llama from scratch (target's tokenizer) and pretrain it on --text."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    from specbench_cli.models.load import (
        check_device,
        converted_gguf_dir,
        hub_reachable,
        needs_remote_code,
        remote_code_refused,
        resolve,
    )
    from specbench_cli.models.prompting import set_threads
    from specbench_cli.training.common.io import read_text_file
    from specbench_cli.training.common.loop import trained_model_output
    from specbench_cli.training.draft_model.scratch import pretrain_scratch, scratch_config

    set_threads(threads)
    check_device(device)
    cfg = train_config(steps, batch_size, lr, weight_decay, warmup, grad_clip, save_every, keep, seed)
    out = check_output_for_training(output, resume, force, trained_model_output("train drafter scratch"))
    body = read_text_file(text, "--text file")
    kind, loc = resolve(tokenizer_from)
    folder = str(converted_gguf_dir(loc)) if kind == "gguf" else loc
    if kind == "folder" and not trust_remote_code and (culprit := needs_remote_code(folder)):
        raise remote_code_refused(f"folder {folder} ({culprit} has an auto_map)")
    try:
        kwargs = {"trust_remote_code": trust_remote_code, "local_files_only": kind == "hub" and not hub_reachable()}
        tok = AutoTokenizer.from_pretrained(folder, **kwargs)
        tcfg = AutoConfig.from_pretrained(folder, **kwargs)
    except ValueError as e:
        if "trust_remote_code" not in str(e):
            raise
        raise remote_code_refused(f"'{tokenizer_from}'") from e
    except OSError as e:
        raise UsageError(f"cannot load the tokenizer of '{tokenizer_from}': {str(e).splitlines()[0]}") from e
    mcfg = scratch_config(tcfg.vocab_size, layers, hidden, heads, kv_heads, intermediate,
                          max_positions=max(2048, seq_len), bos_token_id=tcfg.bos_token_id,
                          eos_token_id=tcfg.eos_token_id, pad_token_id=getattr(tcfg, "pad_token_id", None))
    torch.manual_seed(seed)
    model = LlamaForCausalLM(mcfg).to(device)
    summary = pretrain_scratch(model, tok, body, out, cfg, seq_len,
                               meta={"tokenizer_from": tokenizer_from, "text": str(text),
                                     "params": sum(p.numel() for p in model.parameters())},
                               resume=resume, progress=not quiet)
    print_table(f"scratch -> {out}", {"params": summary["params"], "steps": summary["steps_done"],
                                       "seconds": summary["wall_seconds_this_run"]})


@drafter_app.command("distill-data")
def distill_data_cmd(
    output: Path = typer.Option(..., "--output", "-o", help="JSONL file (appended to / resumed if it exists)."),
    target: str = TARGET,
    seeds: Optional[Path] = typer.Option(None, help="Seed instructions JSONL, or hf:PATH_OR_ID[:CONFIG][:SPLIT] "
                                         "(a dataset's prompts; default: the shipped set)."),
    limit: Optional[int] = typer.Option(None, help="Use only the first N seed instructions."),
    temperatures: str = typer.Option("0,0.3,0.7,1.0", help="Comma-separated sampling temperatures (0 = greedy)."),
    top_p: float = typer.Option(0.95, help="Nucleus sampling for temperatures > 0."),
    max_new_tokens: int = typer.Option(128),
    batch_size: int = typer.Option(8, help="Prompts generated together."),
    seed: int = typer.Option(0),
    prompt_template: str = typer.Option("auto", "--prompt-template",
                                        help="How prompts are formatted (as `specbench run --prompt-template`): "
                                             "train on the prompts you benchmark with; recorded in every row."),
    dtype: str = DTYPE, device: str = DEVICE, threads: Optional[int] = THREADS, quiet: bool = QUIET,
    trust_remote_code: bool = TRUST,
):
    """Generate the distillation dataset: the target answers seed instructions at each temperature."""
    from rich.progress import Progress

    from specbench_cli.console import err
    from specbench_cli.models.prompting import set_threads
    from specbench_cli.models.templates import check_template
    from specbench_cli.training.draft_model.distill_data import generate_distill_data, load_seeds, parse_temperatures

    set_threads(threads)
    check_template(prompt_template)
    temps = parse_temperatures(temperatures)
    seed_rows = load_seeds(seeds, limit)
    if output.expanduser().is_symlink():  # appended to: never through a link (before the model loads)
        from specbench_cli.errors import link_refused

        raise link_refused(output.expanduser())
    if output.expanduser().is_dir():
        raise UsageError(f"--output {output} is a folder; give a .jsonl file path")
    t0 = time.time()
    lm = load(target, device, dtype, trust_remote_code)
    with Progress(console=err, disable=quiet) as bar:
        task = bar.add_task("distill-data", total=len(seed_rows) * len(temps))
        stats = generate_distill_data(lm.model, lm.tokenizer, seed_rows, output, target, temps, top_p,
                                      max_new_tokens, batch_size, seed, on_batch=lambda n: bar.advance(task, n),
                                      template=prompt_template)
    print_table(f"distill-data -> {output}", {**stats, "seconds": time.time() - t0})


@drafter_app.command("finetune")
def finetune_cmd(
    drafter: str = typer.Option(..., help="Drafter folder (from subclone / scratch / an earlier finetune)."),
    data: Path = typer.Option(..., help="Distillation JSONL from distill-data, or hf:PATH_OR_ID[:CONFIG][:SPLIT] "
                                   "(instruction/response or ShareGPT conversations)."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the fine-tuned drafter + checkpoints."),
    target: Optional[str] = typer.Option(None, "--target", "-m", help="Target model (default: the data's 'target')."),
    loss: str = typer.Option("tvd++", help="kld | tvd | tvd++."),
    pretrain_text: Optional[Path] = typer.Option(None, help="Plain text for the pretraining share."),
    pretrain_mix: Optional[float] = typer.Option(None, help="Share of steps on pretraining text "
                                                 "(default 0.2 with --pretrain-text, else 0)."),
    steps: int = typer.Option(200), batch_size: int = typer.Option(4), lr: float = typer.Option(1e-4),
    weight_decay: float = typer.Option(0.0), warmup: int = typer.Option(10), grad_clip: float = typer.Option(1.0),
    max_len: int = typer.Option(384, help="Max tokens per distillation example (prompt + response)."),
    pretrain_seq_len: int = typer.Option(128, help="Tokens per pretraining-text chunk."),
    holdout: float = typer.Option(0.2, help="Share of instructions held out for evaluation."),
    cache_target: bool = typer.Option(False, help="Compute the target's logits on the training data once "
                                      "(float16 in RAM: 2 * vocab bytes per response token) instead of every step."),
    save_every: int = typer.Option(50), keep: int = typer.Option(2), seed: int = typer.Option(0),
    resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --output."),
    force: bool = typer.Option(False, help="Start over in an --output holding an earlier output of this command "
                               "(its checkpoints removed; a folder holding other files is refused even so)."),
    prompt_template: Optional[str] = DATA_TEMPLATE,
    dtype: str = DTYPE, device: str = DEVICE, threads: Optional[int] = THREADS, quiet: bool = QUIET,
    trust_remote_code: bool = TRUST,
):
    """White-box distillation of the target into the drafter (KLD, TVD or TVD++)."""
    from specbench_cli.models.prompting import set_threads
    from specbench_cli.training.common.io import read_text_file
    from specbench_cli.training.common.loop import trained_model_output
    from specbench_cli.training.draft_model.distill_data import load_training_rows
    from specbench_cli.training.draft_model.finetune import check_distill_rows, finetune
    from specbench_cli.training.draft_model.losses import LOSSES

    set_threads(threads)
    check_data_template(prompt_template)
    if loss not in LOSSES:
        from specbench_cli.errors import unknown

        raise unknown("loss", loss, LOSSES)
    cfg = train_config(steps, batch_size, lr, weight_decay, warmup, grad_clip, save_every, keep, seed)
    out = check_output_for_training(output, resume, force, trained_model_output("train drafter finetune"))
    rows = load_training_rows(data, "distillation file", prompt_template)
    template = check_distill_rows(rows, data, prompt_template)
    target = target or _data_target(rows, data)
    text = read_text_file(pretrain_text, "--pretrain-text file") if pretrain_text else None
    mix = pretrain_mix if pretrain_mix is not None else (0.2 if text else 0.0)
    d = load(drafter, device, dtype, trust_remote_code)
    t = load(target, device, dtype, trust_remote_code)
    summary = finetune(d.model, t.model, d.tokenizer, rows, out, loss, cfg, text, mix, max_len, holdout,
                       meta={"drafter_init": drafter, "target": target, "data": str(data),
                             "pretrain_text": str(pretrain_text) if pretrain_text else None,
                             "prompt_template": template},
                       resume=resume, progress=not quiet, pretrain_seq_len=pretrain_seq_len,
                       cache_target=cache_target)
    table = {"steps": summary["steps_done"], "training seconds": summary["wall_seconds_this_run"],
             "total seconds": summary["wall_seconds_total"]}
    for when in ("eval_before", "eval_after"):
        if when in summary:
            table.update({f"{when} {k}": v for k, v in summary[when].items()})
    print_table(f"finetune {loss} -> {out}", table)


def _data_target(rows: list[dict], path: Path) -> str:
    refs = {r.get("target") for r in rows}
    if len(refs) != 1 or None in refs:
        raise UsageError(f"{path} does not name one target model; pass --target")
    return refs.pop()


@drafter_app.command("evaluate")
def evaluate_cmd(
    drafter: str = typer.Option(..., help="Drafter folder."),
    data: Path = typer.Option(..., help="Distillation JSONL."),
    target: Optional[str] = typer.Option(None, "--target", "-m", help="Target model (default: the data's 'target')."),
    split: str = typer.Option("heldout", help="heldout | train | all (same split rule as finetune)."),
    holdout: float = typer.Option(0.2, help="Must match the finetune --holdout for a clean held-out set."),
    max_len: int = typer.Option(384), batch_size: int = typer.Option(8),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the numbers to this JSON file."),
    dtype: str = DTYPE, device: str = DEVICE, threads: Optional[int] = THREADS,
    trust_remote_code: bool = TRUST,
):
    """Agreement of drafter and target on the responses: top-1, TVD (1-TVD = expected acceptance), KL."""
    from specbench_cli.models.prompting import set_threads, stop_token_ids
    from specbench_cli.training.common.io import write_json
    from specbench_cli.training.draft_model.distill_data import load_training_rows
    from specbench_cli.training.draft_model.finetune import (
        agreement,
        build_examples,
        check_distill_rows,
        check_same_vocab,
        split_rows,
    )

    set_threads(threads)
    splits = ("heldout", "train", "all")
    if split not in splits:
        from specbench_cli.errors import unknown

        raise unknown("split", split, splits)
    rows = load_training_rows(data, "distillation file")
    check_distill_rows(rows, data)
    train_rows, held = split_rows(rows, holdout)
    chosen = {"heldout": held, "train": train_rows, "all": rows}[split]
    target = target or _data_target(rows, data)
    d = load(drafter, device, dtype, trust_remote_code)
    t = load(target, device, dtype, trust_remote_code)
    check_same_vocab(d.model, t.model)
    examples = build_examples(chosen, t.tokenizer, t.model, max_len)
    pad = t.tokenizer.pad_token_id if t.tokenizer.pad_token_id is not None else stop_token_ids(t.tokenizer, t.model)[0]
    res = agreement(d.model, t.model, examples, pad, batch_size)
    res = {"drafter": drafter, "target": target, "split": split, "rows": len(chosen), **res}
    if json_out:
        write_json(json_out, res)
    print_table(f"agreement {drafter} vs {target}", res)
