"""Hydra heads (methods/heads/hydra/model.py `HydraHeads`): sequentially dependent heads, with
Hydra++'s prefix layer; `hydra_heads.safetensors` and a config of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench_cli.methods.heads.kinds import HeadKind, heads_and_layers

FILE = "hydra_heads.safetensors"


def _check(cfg: dict, path: Path) -> None:
    from specbench_cli.methods.heads.hydra.model import hydra_fields

    hydra_fields(cfg, path)


def _build(cfg: dict, header: dict, path: Path, target_config: Any = None):
    from specbench_cli.methods.heads.hydra.model import build_hydra

    return build_hydra(cfg, target_config, header)


def _fit(head: Any, model: Any, folder: Path) -> tuple[int, int | None, bool]:
    # heads trained here share the target's LM head; published ones have their own
    return head.hidden, head.own_vocab, head.own_vocab is not None


KIND = HeadKind(
    name="hydra", weights=FILE,
    claims=lambda folder, cfg: (folder / FILE).is_file(),
    check_config=_check, build=_build, fit=_fit,
    header_sizes=lambda cfg: [("hidden_size", "hidden"), ("vocab_size", "vocab")],
    shape=heads_and_layers("hydra"), train_flags=" --heads-count 4",
    trainer="specbench_cli.training.heads.hooks:HYDRA",
    importers=("specbench_cli.methods.heads.hydra.importer",),
)
