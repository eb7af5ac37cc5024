"""DFlash's trainer hooks (`specbench train heads --kind dflash`): the kind's training (its
objective, the new drafter, the target layers it reads) is in its package,
methods/heads/dflash/training.py; this module joins it to the trainer's own pieces (the batches
of a layer feature cache, `TrainerHooks`), which code under methods/ may not import (the layers
in pyproject.toml).
"""

from __future__ import annotations

from specbench_cli.methods.heads.dflash.training import build, check_cache, checks, losses, target_layers_for


def _hooks():
    from specbench_cli.training.heads.eagle3 import make_eagle3_batch
    from specbench_cli.training.heads.hooks import TrainerHooks

    return TrainerHooks(
        build=build, batch=lambda cache, seqs, recipe: make_eagle3_batch(cache, seqs, max_len=recipe.max_len),
        losses=losses, label=lambda r: f"dflash(K={r.layers},B={r.block_size})", checks=checks,
        reads_layers=True,
        feature_layers=lambda recipe, n_layers: tuple(i + 1 for i in target_layers_for(recipe, n_layers)),
        check_cache=check_cache, cache_suffix=".dflash-features")


HOOKS = _hooks()
