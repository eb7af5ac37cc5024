"""The generic resumable training loop shared by distillation fine-tuning, `scratch`
pretraining, `train sft|msn` and the draft heads (`train heads`): config, LR schedule,
checkpoints (safetensors + JSON, no pickles), RNG state, the loss plot. What a trainer needs
beyond one model and one optimiser is an option of `train_loop`: its own folder writer and
restore (`save_folder`, `restore`), a second model with its own optimiser (`second`: KOALA's
discriminator), fields added to the summary (`finish`) and its own history files (`write_history`)."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from specbench_cli.atomic import OutputFolder, atomic_write, link_problem, write_staged
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.training.common.checkpoint import list_checkpoints, write_checkpoint
from specbench_cli.training.common.compute import lr_factor
from specbench_cli.training.common.io import DRAFTER_META, MODEL_FILES, save_model_folder, write_json
from specbench_cli.training.common.state_io import has_state, load_state, save_state

CKPT_DIR = "checkpoints"
# what one training run records beside its model: the summary (written last: a finished output's
# marker), the default history files and the checkpoints
RUN_RECORDS = ("training.json", "history.jsonl", "loss_curve.png", f"{CKPT_DIR}/step-*")


def trained_model_output(command: str, extra: tuple[str, ...] = ()) -> OutputFolder:
    """The output folder of a trainer of whole models (`train drafter scratch|finetune`, `train
    sft|msn|space|pard`): a model folder, its record, the run's records, `extra` names."""
    return OutputFolder(command, "a trained model", "training.json", (*MODEL_FILES, DRAFTER_META, *RUN_RECORDS, *extra))


@dataclass
class TrainConfig:
    steps: int = 200
    batch_size: int = 4
    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup: int = 10
    grad_clip: float = 1.0
    save_every: int = 50
    keep: int = 2
    seed: int = 0
    extra: dict = field(default_factory=dict)

    def validate(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise UsageError("--steps and --batch-size must be >= 1")
        if not 0 < self.lr < math.inf:  # written so that NaN fails too
            raise UsageError(f"--lr must be > 0, got {self.lr}")
        if self.save_every < 1 or self.keep < 1:
            raise UsageError("--save-every and --keep must be >= 1")
        if self.warmup < 0 or not 0 < self.grad_clip < math.inf:
            raise UsageError("--warmup must be >= 0 and --grad-clip > 0")
        if not 0 <= self.weight_decay < math.inf:
            raise UsageError(f"--weight-decay must be >= 0, got {self.weight_decay}")


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints under out/checkpoints, oldest first."""
    return list_checkpoints(Path(out) / CKPT_DIR, has_state)


def check_resume(out: Path, resume: bool, flag: str = "-o") -> list[Path]:
    """The checkpoints under `out` (oldest first); UsageError when `resume` finds none, or when
    there are some and `resume` is off (`flag`: the command's output option)."""
    found = checkpoints(out)
    if resume and not found:
        raise UsageError(f"--resume: no checkpoint under {Path(out) / CKPT_DIR}")
    if not resume and found:
        raise UsageError(f"{out} already has checkpoints; pass --resume to continue, or choose another {flag}")
    return found


def _lr_lambda(warmup: int, steps: int):
    return lambda step: lr_factor(step, warmup, steps)


def _rng_state() -> dict:
    import numpy as np
    import torch

    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def _set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


@dataclass
class SecondModel:
    """A model trained beside the main one with its own optimiser (KOALA's discriminator):
    `step(step, logs)` is its update, run after the main model's at every step (it may add to
    the step's logs); its weights and optimiser state are part of every checkpoint."""

    module: Any
    optimizer: Any
    step: Callable[[int, dict], None]


def _save_checkpoint(out: Path, step: int, model, tokenizer, opt, sched, history, meta, keep: int,
                     save_folder=save_model_folder, second: SecondModel | None = None) -> Path:
    def write(folder: Path) -> None:
        save_folder(model, tokenizer, folder, {**meta, "step": step})
        state = {"step": step, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                 "rng": _rng_state(), "history": history}
        if second is not None:
            state["second"] = {"weights": second.module.state_dict(), "optimizer": second.optimizer.state_dict()}
        save_state(folder, state)

    return write_checkpoint(Path(out) / CKPT_DIR, step, write, keep, has_state)


def plot_history(history: list[dict], path: Path, title: str) -> None:
    """Loss-curve PNG against the step: left panel the series bounded in [0, 1] (tvd, top1),
    right panel the others (loss, kld, pretrain_ce)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    skip = ("step", "lr", "kind", "grad_norm", "seconds")
    series = {}
    for k in dict.fromkeys(k for h in history for k in h):
        pts = [(h["step"], h[k]) for h in history if isinstance(h.get(k), (int, float))]
        if k not in skip and pts:
            series[k] = pts
    unit = {k: v for k, v in series.items() if all(0 <= y <= 1 for _, y in v)}
    other = {k: v for k, v in series.items() if k not in unit}
    panels = [p for p in (unit, other) if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for k, pts in panel.items():
            ax.plot(*zip(*pts), label=k, marker="." if len(pts) < 60 else None, linewidth=1)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


StepFn = Callable[[int], tuple[Any, dict]]


def restore_weights(model: Any, ck: Path) -> None:
    """Default checkpoint restore: the checkpoint's HF folder into `model` (all weights)."""
    # use_safetensors: never fall back to a pickled pytorch_model.bin found in the folder
    loaded = type(model).from_pretrained(ck, dtype=next(model.parameters()).dtype, use_safetensors=True)
    model.load_state_dict(loaded.state_dict())
    del loaded


def _resume(ck: Path, model: Any, opt: Any, sched: Any, cfg: TrainConfig, restore: Callable,
            second: SecondModel | None = None) -> tuple[list[dict], int]:
    """Load checkpoint `ck` into model, optimizer, scheduler and RNGs; (history, step reached)."""
    from specbench_cli.console import err

    state = load_state(ck)  # no pickle: a checkpoint folder may come from anyone
    restore(model, ck)
    opt.load_state_dict(state["optimizer"])
    if second is not None:
        second.module.load_state_dict(state["second"]["weights"])
        second.optimizer.load_state_dict(state["second"]["optimizer"])
    sched.load_state_dict(state["scheduler"])
    _set_rng_state(state["rng"])
    history, start = state["history"], state["step"]
    # the LR is a function of the step under this run's schedule (--steps may have grown since)
    sched.base_lrs = [cfg.lr for _ in opt.param_groups]
    for group in opt.param_groups:
        group["lr"] = cfg.lr * lr_factor(start, cfg.warmup, cfg.steps)
    if start > cfg.steps:
        raise UsageError(f"checkpoint {ck.name} is already at step {start} > --steps {cfg.steps}")
    # start == steps: nothing left to train; the final folder, curve and summary are (re)written
    err.print(f"[dim]resuming from {ck} at step {start}[/dim]")
    return history, start


def write_history_files(history: list[dict], out: Path, title: str) -> None:
    """The default history files: `history.jsonl` and `loss_curve.png`."""
    atomic_write(out / "history.jsonl", "".join(json.dumps(h) + "\n" for h in history))
    plot_history(history, out / "loss_curve.png", title)


def train_loop(model: Any, tokenizer: Any, out: Path, cfg: TrainConfig, step_fn: StepFn, meta: dict,
               resume: bool = False, progress: bool = True, title: str = "training",
               save_folder: Callable = save_model_folder, restore: Callable = restore_weights,
               second: SecondModel | None = None, finish: Callable[[list[dict]], dict] | None = None,
               write_history: Callable[[list[dict], Path, str], None] = write_history_files) -> dict:
    """Generic resumable loop: AdamW, warmup+cosine LR, grad clipping, checkpoints.

    `step_fn(step)` returns (scalar loss tensor with grad, dict of floats to log). Every
    `cfg.save_every` steps (and at the end) a checkpoint is written to
    out/checkpoints/step-NNNNNNN/ as a Hugging Face folder + trainer_state.{json,safetensors} (optimizer,
    scheduler, step, RNG states, history); the last `cfg.keep` are kept. With `resume`, the
    latest checkpoint's weights and state are loaded and training continues at its step (a
    checkpoint already at `cfg.steps` is just exported).
    At the end the model goes to `out/` (HF folder, written into a fresh folder and renamed into
    place file by file), with history.jsonl, loss_curve.png and training.json. Returns the
    training.json dict.
    `save_folder(model, tokenizer, folder, meta)` writes a model folder and `restore(model, ck)`
    loads a checkpoint's weights back (defaults: all weights; LoRA passes its own, sft_lora.py;
    the heads trainer writes heads folders). `second`: a model updated after the main one at
    every step, with its own optimiser. `finish(history)`: fields added to the summary once the
    last step ran (the model in eval mode), before the final folder is written.
    `write_history(history, out, title)`: the history files (default `write_history_files`).
    A history entry's `seconds` counts training time across resumed runs.
    """
    import torch

    cfg.validate()
    out = Path(out)
    if out.is_symlink():
        raise UsageError(link_problem(out))
    found = check_resume(out, resume)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg.warmup, cfg.steps))
    history, start = _resume(found[-1], model, opt, sched, cfg, restore, second) if resume else ([], 0)
    full_meta = {**meta, "train_config": asdict(cfg)}
    model.train()
    t0 = time.time()
    seconds0 = float(history[-1].get("seconds", 0.0)) if history else 0.0
    from specbench_cli.training.common.progress import progress_bar

    with progress_bar(title, cfg.steps, start, progress) as advance:
        for step in range(start, cfg.steps):
            loss, logs = step_fn(step)
            if not torch.isfinite(loss):
                raise RuntimeFailure(f"loss became {loss.item()} at step {step}; lower --lr")
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if second is not None:
                second.step(step, logs)
            history.append({"step": step + 1, **logs, "lr": sched.get_last_lr()[0], "grad_norm": float(gnorm),
                            "seconds": round(seconds0 + time.time() - t0, 3)})
            advance(" ".join(f"{k}={v:.4g}" for k, v in logs.items() if isinstance(v, float)))
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                _save_checkpoint(out, step + 1, model, tokenizer, opt, sched, history, full_meta, cfg.keep,
                                 save_folder, second)
    model.eval()
    train_seconds = time.time() - t0
    summary = {**full_meta, "steps_done": cfg.steps, "resumed_from": start if resume else None,
               "wall_seconds_this_run": round(train_seconds, 2)}
    if finish is not None:
        summary.update(finish(history))
        model.eval()
    # staged: a link at one of the folder's names (a resumed folder from elsewhere) is replaced, not followed
    write_staged(out, lambda stage: save_folder(model, tokenizer, stage, summary))
    write_history(history, out, title)
    write_json(out / "training.json", summary)
    return summary
