"""Trainer hooks of a head kind: what `specbench train heads --kind KIND` does differently for
each kind, named by the kind's declaration (`KIND` in methods/heads/<kind>/kind.py, field
`trainer`). The trainer (training/heads/train.py) runs every kind through the shared training
loop with these hooks:

- `build(recipe, target, cache, resume_from, vocab_file)` -> (head, weight, vocab, extra): the new
  head, the LM-head rows its distillation softmax runs over [V', h], the draft vocabulary stored
  with the head (sorted target ids, or None) and fields for the summary;
- `batch(cache, seqs, recipe)`: one training batch of cached features;
- `losses(head, batch, weight, recipe, step)` -> (loss, logs, adversarial rows): the distillation
  loss, its logs, and the (hidden, target logits, draft logits) rows KOALA's discriminator sees;
- `checks(recipe)`: (ok, message) pairs of the recipe options that apply to this kind;
- `label(recipe)`: the head's label (`eagle(K=1,adv)`);
- `heads_count`: the default of `--heads-count`;
- `reads_layers`, `feature_layers(recipe, n_layers)`: the target layers whose inputs the feature
  cache holds (None: the last hidden state only), `check_cache(cache, folder, layers)` for a cache
  given, and the default cache folder's suffix.

Medusa, EAGLE and Hydra are here (their heads are built from the shared pieces below, their loss
terms are training/heads/losses.py's); EAGLE-3's and DFlash's hooks are in training/heads/eagle3.py
and dflash.py, on their kinds' own training code (methods/heads/eagle3/training.py,
methods/heads/dflash/training.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch


@dataclass(frozen=True)
class TrainerHooks:
    build: Callable[..., tuple[Any, torch.Tensor, Optional[torch.Tensor], dict]]
    batch: Callable[[Any, list[int], Any], tuple]
    losses: Callable[[Any, tuple, torch.Tensor, Any, int], tuple[torch.Tensor, dict, list]]
    label: Callable[[Any], str]
    checks: Callable[[Any], list[tuple[bool, str]]] = lambda recipe: []
    heads_count: int = 3
    reads_layers: bool = False  # its feature cache holds three target layers' inputs (an EAGLE-3 cache)
    feature_layers: Callable[[Any, int], Optional[tuple[int, ...]]] = lambda recipe, n_layers: None
    check_cache: Callable[[Any, Path, tuple[int, ...]], None] = lambda cache, folder, layers: None
    cache_suffix: str = ".features"  # the default feature-cache folder is DATA + this


def data_vocab(cache: Any, lm_head_weight: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Sorted ids [V'] = tokens of the data plus the target's top-1 at every cached position."""
    tops = [cache.tokens.unique()]
    for i in range(0, cache.features.shape[0], chunk):
        tops.append((cache.features[i:i + chunk].float() @ lm_head_weight.float().t()).argmax(-1).unique())
    return torch.cat(tops).unique()


def cached_vocab(cache: Any, lm_head_weight: torch.Tensor, path: Path | None) -> torch.Tensor:
    """`data_vocab`, stored in / read from the safetensors file `path` when given (one pass over
    the features with the 49k-wide LM head takes minutes on a busy CPU)."""
    from safetensors.torch import load_file, save_file

    if path is not None and Path(path).is_file():
        return load_file(str(path))["vocab"]
    vocab = data_vocab(cache, lm_head_weight)
    if path is not None:
        from specbench_cli.atomic import atomic_write

        atomic_write(path, lambda tmp: save_file({"vocab": vocab}, str(tmp)))  # a link there is replaced
    return vocab


def _shared_lm_head(new_head: Callable[[Any, Any], Any]):
    """`build` of heads that rank tokens through the target's LM head: over the data's
    sub-vocabulary (stored with the head) unless --full-vocab."""
    def build(recipe: Any, target: Any, cache: Any, resume_from: Path | None, vocab_file: Path | None):
        lm_w = target.get_output_embeddings().weight
        vocab = cached_vocab(cache, lm_w, vocab_file) if recipe.sub_vocab else None
        weight = lm_w[vocab].float() if vocab is not None else lm_w.float()
        return new_head(recipe, target), weight, vocab, {}
    return build


def _plain_batch(cache: Any, seqs: list[int], recipe: Any):
    from specbench_cli.training.heads.data import make_batch

    return make_batch(cache, seqs, max_len=recipe.max_len)


def _per_head_losses(terms_of: Callable):
    """Medusa's and Hydra's loss: the sum of each head's soft cross-entropy against the target."""
    def losses(head: Any, batch: tuple, weight: torch.Tensor, recipe: Any, step: int):
        from specbench_cli.training.heads.losses import accuracy, soft_ce

        terms = terms_of(head, batch, weight)
        loss = sum(soft_ce(t, d) for _, t, d in terms)
        logs: dict[str, float] = {}
        for i, (_, t, d) in enumerate(terms):
            logs[f"top1_h{i}"], logs[f"top5_h{i}"] = accuracy(t, d)
        logs["distill"] = loss.item()
        return loss, logs, [(s, t, d) for s, t, d in terms]
    return losses


def _medusa_head(recipe: Any, target: Any):
    from specbench_cli.methods.heads.model import MedusaHeads

    return MedusaHeads(target.config.hidden_size, recipe.heads_count, recipe.layers).bind(target)


def _medusa_terms(head: Any, batch: tuple, weight: torch.Tensor):
    from specbench_cli.training.heads.losses import medusa_terms

    tokens, feats, valid, loss_mask = batch[:4]
    return medusa_terms(head, feats, loss_mask, weight)


def _hydra_head(recipe: Any, target: Any):
    from specbench_cli.methods.heads.hydra.model import HydraHeads
    from specbench_cli.methods.heads.model import eagle_config

    torch.manual_seed(recipe.seed)
    prefix = eagle_config(target.config, 1) if recipe.arch == "prefix-mlp" else None
    return HydraHeads(target.config.hidden_size, recipe.heads_count, recipe.layers, recipe.arch,
                      prefix=prefix).bind(target)


def _hydra_terms(head: Any, batch: tuple, weight: torch.Tensor):
    from specbench_cli.training.heads.losses import hydra_terms

    tokens, feats, valid, loss_mask = batch[:4]
    return hydra_terms(head, feats, tokens, valid, loss_mask, weight)


def _eagle_head(recipe: Any, target: Any):
    from specbench_cli.methods.heads.model import EagleHead, eagle_config

    torch.manual_seed(recipe.seed)
    return EagleHead(eagle_config(target.config, recipe.layers)).bind(target)


def _eagle_losses(head: Any, batch: tuple, weight: torch.Tensor, recipe: Any, step: int):
    """Feature regression (smooth L1) + p_weight x token soft cross-entropy, features noised."""
    from specbench_cli.training.heads.losses import accuracy, eagle_terms, soft_ce

    tokens, feats, valid, loss_mask = batch[:4]
    g = torch.Generator().manual_seed(recipe.seed * 104729 + step)
    pred, tgt, src, t, d = eagle_terms(head, feats, tokens, valid, loss_mask, weight, recipe.noise, g)
    reg = torch.nn.functional.smooth_l1_loss(pred, tgt)
    ce = soft_ce(t, d)
    loss = reg + recipe.p_weight * ce
    logs = {"reg": reg.item(), "ce": ce.item()}
    logs["top1_h0"], logs["top5_h0"] = accuracy(t, d)
    logs["distill"] = loss.item()
    return loss, logs, [(src, t, d)]


def _adv(recipe: Any) -> str:
    return ",adv" if recipe.adversarial else ""


MEDUSA = TrainerHooks(
    build=_shared_lm_head(_medusa_head), batch=_plain_batch, losses=_per_head_losses(_medusa_terms),
    label=lambda r: f"medusa(H={r.heads_count},K={r.layers}{_adv(r)})")

HYDRA = TrainerHooks(
    build=_shared_lm_head(_hydra_head), batch=_plain_batch, losses=_per_head_losses(_hydra_terms),
    label=lambda r: f"hydra(H={r.heads_count},K={r.layers}{',mlp' if r.arch == 'mlp' else ''}{_adv(r)})",
    heads_count=4)

EAGLE = TrainerHooks(
    build=_shared_lm_head(_eagle_head), batch=_plain_batch, losses=_eagle_losses,
    label=lambda r: f"eagle(K={r.layers}{_adv(r)})")
