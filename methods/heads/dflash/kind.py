"""DFlash drafters (methods/heads/dflash/model.py `DFlashDrafter`): a few non-causal layers over the
target's multi-layer context features, stored in z-lab's published layout (`model.safetensors`,
a Qwen3-style `config.json` with `dflash_config`). A published z-lab folder is itself a heads
folder of this kind (its `dflash.py` and `auto_map` are never run); `specbench heads import`
copies one into a folder with our metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.eagle.kind import check_fields
from specbench_cli.methods.heads.kinds import HeadKind

FILE = "model.safetensors"
FIELDS = {"hidden_size": (int, True), "intermediate_size": (int, True), "num_hidden_layers": (int, True),
          "num_attention_heads": (int, True), "vocab_size": (int, True), "num_key_value_heads": (int, False),
          "head_dim": (int, False), "rms_norm_eps": (float, False), "max_position_embeddings": (int, False),
          "num_target_layers": (int, False), "target_hidden_size": (int, False)}


def is_dflash(cfg: dict) -> bool:
    """Does a config describe a DFlash drafter (z-lab's `dflash_config`, or its architecture name)?"""
    archs = cfg.get("architectures")
    return isinstance(cfg.get("dflash_config"), dict) or (
        isinstance(archs, list) and any(isinstance(a, str) and a.startswith("DFlash") for a in archs))


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(cfg: dict, path: Path) -> None:
    from specbench_cli.methods.heads.dflash.model import dflash_field

    check_fields(cfg, path, FIELDS)
    archs = cfg.get("architectures") or []
    if "DFlash2DraftModel" in archs or "selector_rank" in (cfg.get("dflash_config") or {}):
        raise UsageError(f"{path}: a DFlash-2 drafter (convolutions and a candidate selector) is not supported; "
                         f"dflash reads DFlashDraftModel folders")
    layers = dflash_field(cfg, "target_layer_ids")
    if not (isinstance(layers, list) and layers and all(_int(i) and i >= 0 for i in layers)):
        raise UsageError(f"{path}: 'dflash_config.target_layer_ids' must be a non-empty list of layer indices, "
                         f"got {json.dumps(layers)}")
    mask = dflash_field(cfg, "mask_token_id")
    if not (_int(mask) and mask >= 0):
        raise UsageError(f"{path}: 'dflash_config.mask_token_id' must be a token id, got {json.dumps(mask)}")
    block = dflash_field(cfg, "block_size", 16)
    if not (_int(block) and 2 <= block <= 1024):
        raise UsageError(f"{path}: 'block_size' must be an integer in [2, 1024], got {json.dumps(block)}")
    if cfg.get("is_causal") is True:
        raise UsageError(f"{path}: 'is_causal' is true: a DFlash drafter attends both ways inside its block")
    if cfg.get("use_sliding_window") and "sliding_attention" in (cfg.get("layer_types") or []):
        raise UsageError(f"{path}: sliding-window drafter layers are not supported")
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    if heads % kv:
        raise UsageError(f"{path}: num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv})")


def _build(cfg: dict, header: dict, path: Path, target_config: Any = None):
    from specbench_cli.methods.heads.dflash.model import DFlashDrafter

    return DFlashDrafter(cfg)


def check_layers(layer_ids: list[int] | tuple[int, ...], n_target: int | None, folder: Any,
                 declared: int | None = None) -> None:
    """UsageError unless every target layer the drafter reads exists (and the config's own
    `num_target_layers`, when it has one, is the target's)."""
    if n_target is None:
        return
    bad = [i for i in layer_ids if not 0 <= i < n_target]
    if bad:
        raise UsageError(f"heads {folder}: the drafter reads target layers {list(layer_ids)}, the target has "
                         f"{n_target} layers (0..{n_target - 1}): made for another model")
    if declared is not None and declared != n_target:
        raise UsageError(f"heads {folder}: config.json's 'num_target_layers' is {declared}, the target has "
                         f"{n_target} layers: made for another model")


def _fit(head: Any, target: Any, folder: Path) -> tuple[int, int | None, bool]:
    cfg = target.config
    check_layers(head.target_layer_ids, int(cfg.num_hidden_layers), folder, head.cfg.get("num_target_layers"))
    if head.target_hidden != int(cfg.hidden_size):
        raise UsageError(f"heads {folder}: the drafter reads target states of width {head.target_hidden}, the "
                         f"target's are {cfg.hidden_size}: made for another model")
    rows = int(target.token_embeddings().weight.shape[0])
    if head.mask_token_id >= rows:
        raise UsageError(f"heads {folder}: mask_token_id {head.mask_token_id} is past the target's embedding "
                         f"({rows} rows): made for another model")
    return int(head.config.hidden_size), None, True


KIND = HeadKind(
    name="dflash", weights=FILE,
    claims=lambda folder, cfg: (folder / FILE).is_file() and is_dflash(cfg),
    check_config=_check, build=_build, fit=_fit,
    header_sizes=lambda cfg: [("hidden_size", "hidden"), ("vocab_size", "vocab")],
    shape=lambda head, cfg: f"K={head.n_layers if head is not None else cfg.get('num_hidden_layers', '?')},"
                            f"B={head.block_size if head is not None else _block(cfg)}",
    train_flags=" --layers 1 --block-size 16",
    trainer="specbench_cli.training.heads.dflash:HOOKS",
    importers=("specbench_cli.methods.heads.dflash.importer",),
)


def _block(cfg: dict) -> Any:
    inner = cfg.get("dflash_config")
    return (inner or {}).get("block_size", cfg.get("block_size", 16)) if isinstance(inner, dict) else \
        cfg.get("block_size", 16)
