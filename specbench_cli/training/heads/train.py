"""Trainer of the draft heads (target frozen, features cached), every head kind on the shared
training loop (training/common/loop.py): Medusa, EAGLE, KOALA (+ adversarial), Hydra, EAGLE-3
(training-time test, own draft vocabulary). What differs by kind (the head, its batches, its
loss, its label and option checks) is the kind's trainer hooks (training/heads/hooks.py,
training/heads/eagle3.py, training/heads/dflash.py), named by its declaration
(methods/heads/<kind>/kind.py).

The loop's options carry what the heads need beyond one model: KOALA's discriminator is its
second model (its own AdamW, updated after the head on the same batch), and its folders are heads
folders (methods/heads/checkpoint.py: save_heads). Checkpoints (`out/checkpoints/step-NNNNNNN/`)
hold only safetensors and JSON: the heads folder and the loop's trainer state (both AdamW
states, the discriminator, the scheduler, RNG states, history). Batches and feature noise
depend on (seed, step) only and the LR is a function of the step, so a resumed run continues
exactly. At the end: the head in `out/`, `history.json`, `curves.png`, `training.json`.
`--autocast` runs the forward passes of the training step under bfloat16 autocast (weights and
AdamW state stay float32; softmax / losses are float32 by autocast's rules); it changes the
numbers, so it is part of the recipe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from specbench_cli.atomic import OutputFolder
from specbench_cli.errors import UsageError
from specbench_cli.methods.heads import kinds
from specbench_cli.methods.heads.checkpoint import save_heads
from specbench_cli.methods.heads.model import count_params
from specbench_cli.registry import load_ref
from specbench_cli.training.common.compute import autocast
from specbench_cli.training.common.io import write_json
from specbench_cli.training.common.loop import CKPT_DIR, SecondModel, TrainConfig, check_resume, train_loop
from specbench_cli.training.heads.data import FeatureCache, split_cache
from specbench_cli.training.heads.hooks import TrainerHooks
from specbench_cli.training.heads.losses import Discriminator, d_loss, g_adv_loss

# what one run records beside the heads folder (training.json last: a finished output's marker)
HEADS_RECORDS = ("training.json", "history.json", "curves.png", f"{CKPT_DIR}/step-*")


def heads_training_output() -> OutputFolder:
    """`train heads`'s output folder (atomic.py `OutputFolder`): a heads folder and its run's records."""
    from specbench_cli.methods.heads.importers import heads_output

    return OutputFolder("train heads", "trained heads", "training.json", (*heads_output().own, *HEADS_RECORDS))


def trainer_hooks(kind: str) -> TrainerHooks:
    """The trainer hooks of head kind `kind` (a registered one)."""
    return load_ref(kinds.get(kind).trainer, f"the trainer of head kind '{kind}'")


@dataclass
class HeadsRecipe:
    kind: str = "eagle"
    heads_count: int = 3
    layers: int = 1
    adversarial: bool = False
    lam: float = 0.1
    disc_layers: int = 1
    disc_width: int = 256
    steps: int = 300
    batch_size: int = 4
    lr: float = 1e-3
    disc_lr: float = 1e-4
    warmup: int = 20
    grad_clip: float = 0.5
    seed: int = 0
    max_len: int = 384
    noise: float = 0.2
    p_weight: float = 0.1
    save_every: int = 50
    holdout: float = 0.05
    sub_vocab: bool = True
    arch: str = "prefix-mlp"  # Hydra heads: prefix-mlp (Hydra++: one decoder layer over the features) | mlp
    autocast: bool = False  # bfloat16 autocast of the head's (and discriminator's) matmuls: ~2.5x faster on AMX CPUs
    ttt_steps: int = 7  # EAGLE-3: steps of the training-time test (EAGLE-3's length 7)
    draft_vocab: int | None = None  # EAGLE-3: draft vocabulary size (None: min(32000, V, distinct response tokens))
    feature_layers: tuple[int, ...] | None = None  # EAGLE-3: the target layers read (None: 2, L//2, L-3)
    block_size: int = 16  # DFlash: the drafter's block (the last verified token + block_size - 1 masks)
    anchors: int = 8  # DFlash: blocks (anchor positions) drawn per sequence per step
    loss_gamma: float | None = None  # DFlash: decay of the position weight exp(-(k-1)/gamma) (None: the paper's)
    mask_token: int | None = None  # DFlash: the mask token id (None: the target embedding's last row)
    target_layers: tuple[int, ...] | None = None  # DFlash: target layers read (None: z-lab's rule for --layers)

    def validate(self) -> None:
        """UsageError (exit 2) on a bad option; called before any model loads."""
        kinds.get(self.kind)  # an unknown kind: UsageError naming the registered ones
        checks = [(self.heads_count >= 1, "--heads-count must be >= 1"), (self.layers >= 1, "--layers must be >= 1"),
                  (self.steps >= 1, "--steps must be >= 1"), (self.batch_size >= 1, "--batch-size must be >= 1"),
                  (self.lr > 0 and self.disc_lr > 0, "--lr must be > 0"), (self.lam >= 0, "--lambda must be >= 0"),
                  (self.disc_layers >= 1, "--disc-layers must be >= 1"), (self.save_every >= 1, "--save-every >= 1"),
                  (self.max_len >= 8, "--max-len must be >= 8"), (0 <= self.holdout < 1, "--holdout in [0, 1)"),
                  (self.noise >= 0 and self.grad_clip > 0, "--noise >= 0 and --grad-clip > 0")]
        from specbench_cli.methods.heads.hydra.model import ARCHS

        checks.append((self.arch in ARCHS, f"--hydra-arch must be one of {', '.join(ARCHS)}"))
        checks += [(self.ttt_steps >= 1, "--ttt-steps must be >= 1"),
                   (self.draft_vocab is None or self.draft_vocab >= 1, "--draft-vocab must be >= 1"),
                   (self.feature_layers is None or (len(self.feature_layers) == 3 and min(self.feature_layers) >= 0),
                    "--feature-layers must be three layer indices A,B,C")]
        checks += trainer_hooks(self.kind).checks(self)
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)

    def label(self) -> str:
        return trainer_hooks(self.kind).label(self)

    def loop_config(self) -> TrainConfig:
        """The shared loop's settings of this recipe (AdamW without weight decay, two checkpoints kept)."""
        return TrainConfig(steps=self.steps, batch_size=self.batch_size, lr=self.lr, weight_decay=0.0,
                           warmup=self.warmup, grad_clip=self.grad_clip, save_every=self.save_every, keep=2,
                           seed=self.seed)


def _batch(train_idx: list[int], recipe: HeadsRecipe, step: int) -> list[int]:
    per_epoch = max(1, len(train_idx) // recipe.batch_size)
    epoch, i = divmod(step, per_epoch)
    perm = torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(recipe.seed * 7919 + epoch)).tolist()
    perm = (perm * (1 + recipe.batch_size // max(1, len(perm))))
    return [train_idx[j] for j in perm[i * recipe.batch_size:(i + 1) * recipe.batch_size]]


def head_losses(head, batch, weight: torch.Tensor, recipe: HeadsRecipe, step: int):
    """Distillation loss + logs, and the (hidden, real, fake) rows KOALA's discriminator sees."""
    return trainer_hooks(recipe.kind).losses(head, batch, weight, recipe, step)


@torch.no_grad()
def evaluate(head, cache: FeatureCache, seqs: list[int], weight, recipe: HeadsRecipe) -> dict:
    """Teacher-forced top-1/top-5 per head on held-out sequences (no noise)."""
    head.eval()
    sums: dict[str, float] = {}
    n = 0
    for i in range(0, len(seqs), recipe.batch_size):
        batch = trainer_hooks(recipe.kind).batch(cache, seqs[i:i + recipe.batch_size], recipe)
        _, logs, _ = head_losses(head, batch, weight, HeadsRecipe(**{**asdict(recipe), "noise": 0.0}), 0)
        for k, v in logs.items():
            sums[k] = sums.get(k, 0.0) + v
        n += 1
    head.train()
    return {f"eval_{k}": v / max(1, n) for k, v in sums.items()}


def score_heads(head, cache: FeatureCache, seqs: list[int], weight, batch_size: int = 4, max_len: int = 384) -> dict:
    """`evaluate` for a head loaded from disk (`load_heads`): teacher-forced top-1/top-5 per head on
    cache sequences `seqs`, softmax over the rows of `weight` [V', h]. Lets heads trained on
    different data be compared on the same held-out sequences."""
    recipe = HeadsRecipe(kind=head.kind, heads_count=getattr(head, "n_heads", 1), layers=head.n_layers,
                         batch_size=batch_size, max_len=max_len)
    with torch.no_grad():
        out = evaluate(head, cache, seqs, weight, recipe)
    head.eval()
    return out


def train_heads(target: Any, cache: FeatureCache, recipe: HeadsRecipe, out: Path, meta: dict,
                resume: bool = False, progress: bool = True, vocab_file: Path | None = None) -> dict:
    """Train one head on `cache` with the shared loop (see the module docstring); returns the
    training.json dict."""
    from specbench_cli.methods.heads.checkpoint import load_heads
    from specbench_cli.training.heads.plot import plot_curves

    recipe.validate()
    hooks = trainer_hooks(recipe.kind)
    out = Path(out).expanduser()
    found = check_resume(out, resume, "--out")  # before the head is built (its vocabulary can take minutes)
    for p in target.parameters():
        p.requires_grad_(False)
    head, weight, vocab, extra = hooks.build(recipe, target, cache, found[-1] if resume else None, vocab_file)
    head.train()
    disc = Discriminator(target.config.hidden_size, weight.shape[0], recipe.disc_layers, recipe.disc_width) \
        if recipe.adversarial else None
    train_idx, held = split_cache(cache, recipe.holdout, recipe.seed)
    meta = {**meta, "recipe": asdict(recipe), "label": recipe.label(), "adversarial": recipe.adversarial,
            "lambda": recipe.lam if recipe.adversarial else None, "params": count_params(head),
            "sub_vocab": int(weight.shape[0]), "train_sequences": len(train_idx), "heldout_sequences": len(held),
            **extra}
    rows: list = []  # the G step's (hidden, real, fake) rows, which the D step reads

    def step_fn(step: int):
        batch = hooks.batch(cache, _batch(train_idx, recipe, step), recipe)
        with autocast(recipe.autocast):
            loss, logs, rows[:] = hooks.losses(head, batch, weight, recipe, step)
            if disc is not None:  # G step: L_G = lambda * (-log D(draft)) + L_distill
                adv = sum(g_adv_loss(disc, s.float(), d) for s, _, d in rows) / len(rows)
                loss = loss + recipe.lam * adv
                logs["g_adv"] = adv.item()
        return loss, {"loss": loss.item(), **logs, "tokens": int(batch[3].sum())}

    second = None
    if disc is not None:
        disc_opt = torch.optim.AdamW(list(disc.parameters()), lr=recipe.disc_lr, betas=(0.5, 0.999))

        def d_step(step: int, logs: dict) -> None:  # D step on the same batch, draft logits of the G step detached
            disc_opt.zero_grad(set_to_none=True)
            with autocast(recipe.autocast):
                ld = sum(d_loss(disc, s.float(), t, d) for s, t, d in rows) / len(rows)
            ld.backward()
            disc_opt.step()
            logs["d_loss"] = ld.item()
        second = SecondModel(disc, disc_opt, d_step)

    def finish(history: list[dict]) -> dict:
        return {"tokens_seen": sum(h.get("tokens", 0) for h in history),
                "training_seconds": round(history[-1]["seconds"], 2) if history else 0.0,
                **evaluate(head, cache, held, weight, recipe)}

    def write_history(history: list[dict], folder: Path, title: str) -> None:
        write_json(folder / "history.json", history)
        plot_curves(history, folder / "curves.png", f"{title} on {meta.get('target', 'target')}")

    def restore(model: Any, ck: Path) -> None:
        model.load_state_dict(load_heads(ck).state_dict(), strict=False)

    return train_loop(head, None, out, recipe.loop_config(), step_fn, meta, resume=resume, progress=progress,
                      title=recipe.label(), save_folder=lambda h, _tok, folder, m: save_heads(h, folder, m, vocab),
                      restore=restore, second=second, finish=finish, write_history=write_history)
