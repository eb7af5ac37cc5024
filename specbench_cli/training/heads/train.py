"""Trainer of the draft heads (target frozen, features cached): Medusa, EAGLE, KOALA (+ adversarial), Hydra,
EAGLE-3 (training-time test, own draft vocabulary: training/heads/eagle3.py).

Checkpoints (`out/checkpoints/step-NNNNNNN/`) hold only safetensors and JSON: the head folder
(methods/heads/checkpoint.py: save_heads), `disc.safetensors`, `optim.safetensors` (AdamW moments of head and
discriminator) and `state.json` (step, history, seconds). Batches and feature noise depend on
(seed, step) only and the LR is a function of the step, so a resumed run continues exactly.
At the end: the head in `out/`, `history.json`, `curves.png`, `training.json`.
`--autocast` runs the forward passes of the training step under bfloat16 autocast (weights and
AdamW state stay float32; softmax / losses are float32 by autocast's rules); it changes the
numbers, so it is part of the recipe.
`train_heads` is longer than 60 lines because the G step, the D step and the checkpoint of one
training step read best in one place.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.methods.heads.checkpoint import save_heads
from specbench_cli.methods.heads.model import EagleHead, MedusaHeads, count_params, eagle_config
from specbench_cli.training.common.checkpoint import list_checkpoints, write_checkpoint
from specbench_cli.training.common.compute import autocast, lr_factor
from specbench_cli.training.common.io import write_json
from specbench_cli.training.heads.data import FeatureCache, make_batch, split_cache
from specbench_cli.training.heads.losses import (
    Discriminator,
    accuracy,
    d_loss,
    eagle_terms,
    g_adv_loss,
    hydra_terms,
    medusa_terms,
    soft_ce,
)

KINDS = ("medusa", "eagle", "hydra", "eagle3")
CKPT = "checkpoints"


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

    def validate(self) -> None:
        """UsageError (exit 2) on a bad option; called before any model loads."""
        if self.kind not in KINDS:
            from specbench_cli.errors import unknown

            raise unknown("head kind", self.kind, KINDS)
        checks = [(self.heads_count >= 1, "--heads-count must be >= 1"), (self.layers >= 1, "--layers must be >= 1"),
                  (self.steps >= 1, "--steps must be >= 1"), (self.batch_size >= 1, "--batch-size must be >= 1"),
                  (self.lr > 0 and self.disc_lr > 0, "--lr must be > 0"), (self.lam >= 0, "--lambda must be >= 0"),
                  (self.disc_layers >= 1, "--disc-layers must be >= 1"), (self.save_every >= 1, "--save-every >= 1"),
                  (self.max_len >= 8, "--max-len must be >= 8"), (0 <= self.holdout < 1, "--holdout in [0, 1)"),
                  (self.noise >= 0 and self.grad_clip > 0, "--noise >= 0 and --grad-clip > 0")]
        from specbench_cli.methods.heads.hydra import ARCHS

        checks.append((self.arch in ARCHS, f"--hydra-arch must be one of {', '.join(ARCHS)}"))
        checks += [(self.ttt_steps >= 1, "--ttt-steps must be >= 1"),
                   (self.draft_vocab is None or self.draft_vocab >= 1, "--draft-vocab must be >= 1"),
                   (self.feature_layers is None or (len(self.feature_layers) == 3 and min(self.feature_layers) >= 0),
                    "--feature-layers must be three layer indices A,B,C")]
        if self.kind == "eagle3":
            checks += [(self.layers == 1, "--kind eagle3: the EAGLE-3 head has one layer (--layers 1)"),
                       (not self.adversarial, "--adversarial applies to medusa, eagle and hydra heads, not eagle3"),
                       (self.sub_vocab, "--full-vocab does not apply to eagle3 (its vocabulary is --draft-vocab)")]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg)

    def label(self) -> str:
        adv = ",adv" if self.adversarial else ""
        if self.kind in ("medusa", "hydra"):
            arch = ",mlp" if self.kind == "hydra" and self.arch == "mlp" else ""
            return f"{self.kind}(H={self.heads_count},K={self.layers}{arch}{adv})"
        if self.kind == "eagle3":
            return f"eagle3(ttt={self.ttt_steps})"
        return f"eagle(K={self.layers}{adv})"


def build_head(recipe: HeadsRecipe, target: Any):
    if recipe.kind == "medusa":
        return MedusaHeads(target.config.hidden_size, recipe.heads_count, recipe.layers).bind(target)
    torch.manual_seed(recipe.seed)
    if recipe.kind == "hydra":
        from specbench_cli.methods.heads.hydra import HydraHeads

        prefix = eagle_config(target.config, 1) if recipe.arch == "prefix-mlp" else None
        return HydraHeads(target.config.hidden_size, recipe.heads_count, recipe.layers, recipe.arch,
                          prefix=prefix).bind(target)
    return EagleHead(eagle_config(target.config, recipe.layers)).bind(target)


def data_vocab(cache: FeatureCache, lm_head_weight: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Sorted ids [V'] = tokens of the data plus the target's top-1 at every cached position."""
    tops = [cache.tokens.unique()]
    for i in range(0, cache.features.shape[0], chunk):
        tops.append((cache.features[i:i + chunk].float() @ lm_head_weight.float().t()).argmax(-1).unique())
    return torch.cat(tops).unique()


def cached_vocab(cache: FeatureCache, lm_head_weight: torch.Tensor, path: Path | None) -> torch.Tensor:
    """`data_vocab`, stored in / read from the safetensors file `path` when given (one pass over
    the features with the 49k-wide LM head takes minutes on a busy CPU)."""
    from safetensors.torch import load_file, save_file

    if path is not None and Path(path).is_file():
        return load_file(str(path))["vocab"]
    vocab = data_vocab(cache, lm_head_weight)
    if path is not None:
        save_file({"vocab": vocab}, str(path))
    return vocab


def _lr(step: int, recipe: HeadsRecipe, base: float) -> float:
    return base * lr_factor(step, recipe.warmup, recipe.steps)


def _batch(train_idx: list[int], recipe: HeadsRecipe, step: int) -> list[int]:
    per_epoch = max(1, len(train_idx) // recipe.batch_size)
    epoch, i = divmod(step, per_epoch)
    perm = torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(recipe.seed * 7919 + epoch)).tolist()
    perm = (perm * (1 + recipe.batch_size // max(1, len(perm))))
    return [train_idx[j] for j in perm[i * recipe.batch_size:(i + 1) * recipe.batch_size]]


def _make_batch(cache: FeatureCache, seqs: list[int], recipe: HeadsRecipe):
    if recipe.kind == "eagle3":
        from specbench_cli.training.heads.eagle3 import make_eagle3_batch

        return make_eagle3_batch(cache, seqs, max_len=recipe.max_len)
    return make_batch(cache, seqs, max_len=recipe.max_len)


def head_losses(head, batch, weight: torch.Tensor, recipe: HeadsRecipe, step: int):
    """Distillation loss + logs, and the (hidden, real, fake) rows KOALA's discriminator sees."""
    if recipe.kind == "eagle3":  # soft CE per unrolled step, 0.8^k weights; no discriminator
        from specbench_cli.training.heads.eagle3 import eagle3_loss

        loss, logs = eagle3_loss(head, batch, weight, recipe.ttt_steps)
        logs["distill"] = loss.item()
        return loss, logs, []
    tokens, feats, valid, loss_mask = batch[:4]
    logs: dict[str, float] = {}
    if recipe.kind in ("medusa", "hydra"):
        terms = medusa_terms(head, feats, loss_mask, weight) if recipe.kind == "medusa" \
            else hydra_terms(head, feats, tokens, valid, loss_mask, weight)
        loss = sum(soft_ce(t, d) for _, t, d in terms)
        for i, (_, t, d) in enumerate(terms):
            logs[f"top1_h{i}"], logs[f"top5_h{i}"] = accuracy(t, d)
        adv_rows = [(s, t, d) for s, t, d in terms]
    else:
        g = torch.Generator().manual_seed(recipe.seed * 104729 + step)
        pred, tgt, src, t, d = eagle_terms(head, feats, tokens, valid, loss_mask, weight, recipe.noise, g)
        reg = torch.nn.functional.smooth_l1_loss(pred, tgt)
        ce = soft_ce(t, d)
        loss = reg + recipe.p_weight * ce
        logs.update(reg=reg.item(), ce=ce.item())
        logs["top1_h0"], logs["top5_h0"] = accuracy(t, d)
        adv_rows = [(src, t, d)]
    logs["distill"] = loss.item()
    return loss, logs, adv_rows


def _save_state(out: Path, step: int, head, disc, opts, history, seconds, meta) -> None:
    from safetensors.torch import save_file

    def write(folder: Path) -> None:
        save_heads(head, folder, {**meta, "step": step})
        if disc is not None:
            save_file({k: v.contiguous() for k, v in disc.state_dict().items()}, str(folder / "disc.safetensors"))
        moments = {}
        for name, opt in opts.items():
            for gi, p in enumerate(opt.param_groups[0]["params"]):
                for key, val in opt.state.get(p, {}).items():
                    moments[f"{name}.{gi}.{key}"] = torch.as_tensor(val).float().reshape(-1).clone() \
                        if key == "step" else val.contiguous()
        save_file(moments, str(folder / "optim.safetensors"))
        write_json(folder / "state.json", {"step": step, "history": history, "seconds": seconds})

    write_checkpoint(out / CKPT, step, write, keep=2, complete=_complete)


def _complete(folder: Path) -> bool:
    return (folder / "state.json").is_file()


def _load_state(ck: Path, head, disc, opts) -> dict:
    from safetensors.torch import load_file

    from specbench_cli.methods.heads.checkpoint import load_heads

    head.load_state_dict(load_heads(ck).state_dict(), strict=False)
    if disc is not None:
        disc.load_state_dict(load_file(str(ck / "disc.safetensors")))
    moments = load_file(str(ck / "optim.safetensors"))
    for name, opt in opts.items():
        for gi, p in enumerate(opt.param_groups[0]["params"]):
            st = {k.split(".")[-1]: v for k, v in moments.items() if k.startswith(f"{name}.{gi}.")}
            if st:
                st["step"] = st["step"].reshape(())
                opt.state[p] = st
    return json.loads((ck / "state.json").read_text())


def _eagle3_head(target: Any, cache: FeatureCache, recipe: HeadsRecipe, ck: Path | None):
    """(head, draft-vocabulary rows of the target LM head [N, h], summary fields) of an EAGLE-3 run."""
    from specbench_cli.training.heads.eagle3 import (
        build_eagle3,
        check_cache,
        draft_vocabulary,
        feature_layers_for,
        response_ids,
    )

    layers = feature_layers_for(int(target.config.num_hidden_layers), recipe.feature_layers)
    check_cache(cache, "given to the trainer", layers)
    vocab_size = int(target.config.vocab_size)
    ids = draft_vocabulary(cache, vocab_size, recipe.draft_vocab)
    if ck is not None:
        saved = json.loads((ck / "config.json").read_text()).get("draft_vocab_size")
        if saved != int(ids.shape[0]):
            raise UsageError(f"--resume: checkpoint {ck.name} has a draft vocabulary of {saved} tokens, this run "
                             f"{ids.shape[0]}: give the same --draft-vocab")
    head = build_eagle3(target, layers, ids, recipe.seed)
    resp = response_ids(cache)
    extra = {"draft_vocab": int(ids.shape[0]), "feature_layers": list(layers),
             "draft_vocab_coverage": round(float(head.t2d[resp].float().mean()) if resp.numel() else 0.0, 4),
             "ttt_steps": recipe.ttt_steps}
    return head, target.get_output_embeddings().weight[ids].float(), extra


def latest_checkpoint(out: Path) -> Path | None:
    found = list_checkpoints(Path(out) / CKPT, _complete)
    return found[-1] if found else None


@torch.no_grad()
def evaluate(head, cache: FeatureCache, seqs: list[int], weight, recipe: HeadsRecipe) -> dict:
    """Teacher-forced top-1/top-5 per head on held-out sequences (no noise)."""
    head.eval()
    sums: dict[str, float] = {}
    n = 0
    for i in range(0, len(seqs), recipe.batch_size):
        batch = _make_batch(cache, seqs[i:i + recipe.batch_size], recipe)
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
    """Train one head on `cache` (see the module docstring); returns the training.json dict."""
    from specbench_cli.training.common.progress import progress_bar
    from specbench_cli.training.heads.plot import plot_curves

    recipe.validate()
    out = Path(out).expanduser()
    ck = latest_checkpoint(out)
    if resume and ck is None:
        raise UsageError(f"--resume: no checkpoint under {out / CKPT}")
    if not resume and ck is not None:
        raise UsageError(f"{out} already has checkpoints; pass --resume to continue, or choose another --out")
    for p in target.parameters():
        p.requires_grad_(False)
    lm_w = target.get_output_embeddings().weight
    extra: dict = {}
    if recipe.kind == "eagle3":  # its own draft vocabulary (d2t / t2d in the head), no draft_vocab file
        head, weight, extra = _eagle3_head(target, cache, recipe, ck if resume else None)
        vocab = None
    else:
        vocab = cached_vocab(cache, lm_w, vocab_file) if recipe.sub_vocab else None
        weight = lm_w[vocab].float() if vocab is not None else lm_w.float()
        head = build_head(recipe, target)
    head.train()
    disc = Discriminator(target.config.hidden_size, weight.shape[0], recipe.disc_layers, recipe.disc_width) \
        if recipe.adversarial else None
    opts = {"head": torch.optim.AdamW(list(head.parameters()), lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)}
    if disc is not None:
        opts["disc"] = torch.optim.AdamW(list(disc.parameters()), lr=recipe.disc_lr, betas=(0.5, 0.999))
    train_idx, held = split_cache(cache, recipe.holdout, recipe.seed)
    full_meta = {**meta, "recipe": asdict(recipe), "label": recipe.label(), "adversarial": recipe.adversarial,
                 "lambda": recipe.lam if recipe.adversarial else None, "params": count_params(head),
                 "sub_vocab": int(weight.shape[0]), "train_sequences": len(train_idx), "heldout_sequences": len(held),
                 **extra}
    history, start, seconds0 = [], 0, 0.0
    if resume:
        state = _load_state(ck, head, disc, opts)
        history, start, seconds0 = state["history"], state["step"], state["seconds"]
        if start > recipe.steps:
            raise UsageError(f"checkpoint {ck.name} is at step {start} > --steps {recipe.steps}")
    t0 = time.time()
    seen = sum(h.get("tokens", 0) for h in history)
    with progress_bar(recipe.label(), recipe.steps, start, progress) as advance:
        for step in range(start, recipe.steps):
            batch = _make_batch(cache, _batch(train_idx, recipe, step), recipe)
            with autocast(recipe.autocast):
                loss, logs, rows = head_losses(head, batch, weight, recipe, step)
                if disc is not None:  # G step: L_G = lambda * (-log D(draft)) + L_distill
                    adv = sum(g_adv_loss(disc, s.float(), d) for s, _, d in rows) / len(rows)
                    loss = loss + recipe.lam * adv
                    logs["g_adv"] = adv.item()
            if not torch.isfinite(loss):
                raise RuntimeFailure(f"loss became {loss.item()} at step {step}; lower --lr")
            for g in opts["head"].param_groups:
                g["lr"] = _lr(step, recipe, recipe.lr)
            opts["head"].zero_grad(set_to_none=True)
            if disc is not None:
                opts["disc"].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), recipe.grad_clip)
            opts["head"].step()
            if disc is not None:  # D step on the same batch, draft logits of the G step detached
                opts["disc"].zero_grad(set_to_none=True)
                with autocast(recipe.autocast):
                    ld = sum(d_loss(disc, s.float(), t, d) for s, t, d in rows) / len(rows)
                ld.backward()
                opts["disc"].step()
                logs["d_loss"] = ld.item()
            n_tok = int(batch[3].sum())
            seen += n_tok
            history.append({"step": step + 1, "loss": loss.item(), **logs, "tokens": n_tok,
                            "seconds": round(seconds0 + time.time() - t0, 2)})
            advance(" ".join(f"{k}={v:.3g}" for k, v in logs.items() if k in ("distill", "top1_h0", "d_loss")))
            if (step + 1) % recipe.save_every == 0 or step + 1 == recipe.steps:
                _save_state(out, step + 1, head, disc, opts, history, round(seconds0 + time.time() - t0, 2),
                            full_meta)
    seconds = round(seconds0 + time.time() - t0, 2)
    summary = {**full_meta, "steps_done": recipe.steps, "tokens_seen": seen, "training_seconds": seconds,
               "resumed_from": start if resume else None, **evaluate(head, cache, held, weight, recipe)}
    head.eval()
    save_heads(head, out, summary, vocab=vocab)
    write_json(out / "history.json", history)
    write_json(out / "training.json", summary)
    plot_curves(history, out / "curves.png", f"{recipe.label()} on {meta.get('target', 'target')}")
    return summary
