"""Options and helpers every `specbench train` command shares."""

from __future__ import annotations

from pathlib import Path

import typer

from specbench_cli.models.load import DEFAULT_MODEL

TARGET = typer.Option(DEFAULT_MODEL, "--target", "-m", help="Target model: alias, .gguf, HF folder or hub id.")
DTYPE = typer.Option("float32", help="float32 | bfloat16 | float16.")
DEVICE = typer.Option("cpu", help="cpu | cuda | mps.")
THREADS = typer.Option(None, help="torch CPU threads (1 is fastest on a busy 2-core machine).")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress bar.")
DATA_TEMPLATE = typer.Option(None, "--prompt-template",
                             help="Prompt template the data must have been generated with (auto | vicuna | "
                                  "llama-2 | llama-3 | chatml | none | FILE.jinja); default: the data's own.")


def check_data_template(value):
    """--prompt-template of a training command: None, or a template name / readable .jinja."""
    if value is None:
        return None
    from specbench_cli.models.templates import check_template

    return check_template(value)


TRUST = typer.Option(False, "--trust-remote-code",
                      help="Let the models run the Python code they ship (auto_map); off: such a model is refused.")


def load(ref: str, device: str, dtype: str, trust_remote_code: bool = False):
    from specbench_cli.models.load import load_model

    return load_model(ref, device=device, dtype=dtype, trust_remote_code=trust_remote_code)


def print_table(title: str, rows: dict) -> None:
    from rich.table import Table

    from specbench_cli.console import out

    table = Table(title=title, show_header=False)
    for k, v in rows.items():
        table.add_row(str(k), f"{v:.4f}" if isinstance(v, float) else str(v))
    out.print(table)


def train_config(steps, batch_size, lr, weight_decay, warmup, grad_clip, save_every, keep, seed):
    from specbench_cli.training.common.loop import TrainConfig

    cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, weight_decay=weight_decay, warmup=warmup,
                      grad_clip=grad_clip, save_every=save_every, keep=keep, seed=seed)
    cfg.validate()
    return cfg


def check_output_for_training(out: Path, resume: bool, force: bool, spec=None, records=None,
                              flag: str = "--output") -> Path:
    """The output folder of a trainer, before anything loads: --resume continues in it (kept as
    it is; never a link); otherwise it must be new, empty, or, with --force, an earlier output of
    the same command (`spec`: what it writes, default a whole-model trainer's), whose `records`
    (default the loop's: summary, history, checkpoints) are removed now and whose model files
    the new model replaces (the earlier model may be the run's starting point). A folder holding
    any other file is refused, --force or not (atomic.py `output_folder_problem`)."""
    from specbench_cli.errors import UsageError
    from specbench_cli.training.common.io import check_new_output, check_resume_output, clear_records
    from specbench_cli.training.common.loop import CKPT_DIR, RUN_RECORDS, checkpoints, trained_model_output

    spec = spec or trained_model_output("train")
    if resume:
        out = check_resume_output(out, flag)
    else:
        if not force and not out.expanduser().is_symlink() and checkpoints(out.expanduser()):
            raise UsageError(f"{out} already has checkpoints; pass --resume to continue, or --force to start over")
        out = check_new_output(out, force, spec, flag)
    if (out / CKPT_DIR).is_symlink():
        from specbench_cli.atomic import link_problem

        raise UsageError(f"{flag}: {link_problem(out / CKPT_DIR)}")
    if force and not resume and out.is_dir():
        clear_records(out, spec, RUN_RECORDS if records is None else records)
    return out
