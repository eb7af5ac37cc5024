"""EAGLE-1/2 heads (methods/heads/model.py `EagleHead`: K Llama decoder layers over (feature,
token) pairs), stored with SafeAILab's keys in `model.safetensors` and a Llama-style config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.kinds import HeadKind

FILE = "model.safetensors"

# config fields the head is built from: name -> (type, required)
FIELDS = {"hidden_size": (int, True), "intermediate_size": (int, True), "num_hidden_layers": (int, True),
          "num_attention_heads": (int, True), "vocab_size": (int, True), "num_key_value_heads": (int, False),
          "max_position_embeddings": (int, False), "rms_norm_eps": (float, False), "rope_theta": (float, False),
          "head_dim": (int, False)}


def check_fields(cfg: dict, path: Path, fields: dict) -> None:
    """Each field present (or optional) and a positive number of its type."""
    for key, (typ, required) in fields.items():
        value = cfg.get(key)
        if value is None and not required:
            continue
        ok = isinstance(value, typ) or (typ is float and isinstance(value, int))
        if not ok or isinstance(value, bool) or not value > 0:
            raise UsageError(f"{path}: '{key}' must be a positive {typ.__name__}, got {json.dumps(value)}")


def llama_config(cfg: dict):
    from transformers import LlamaConfig

    return LlamaConfig(**{k: v for k, v in cfg.items() if k != "specbench"})


def _build(cfg: dict, header: dict, path: Path, target_config: Any = None):
    from specbench_cli.methods.heads.model import EagleHead

    return EagleHead(llama_config(cfg))


def _fit(head: Any, model: Any, folder: Path) -> tuple[int, int | None, bool]:
    return int(head.config.hidden_size), int(head.config.vocab_size), False


def layers_shape(head: Any, cfg: dict) -> str:
    return f"K={head.n_layers if head is not None else cfg.get('num_hidden_layers', '?')}"


KIND = HeadKind(
    name="eagle", weights=FILE,
    claims=lambda folder, cfg: (folder / FILE).is_file() and "num_hidden_layers" in cfg and "draft_vocab_size" not in cfg
    and "dflash_config" not in cfg,
    check_config=lambda cfg, path: check_fields(cfg, path, FIELDS),
    build=_build, fit=_fit,
    header_sizes=lambda cfg: [("hidden_size", "hidden"), ("vocab_size", "vocab")],
    shape=layers_shape, train_flags=" --layers 1",
    trainer="specbench_cli.training.heads.hooks:EAGLE",
    importers=("specbench_cli.methods.heads.eagle.importer",),
)
