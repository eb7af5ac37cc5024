"""What a model reference declares before its weights load: the context length, and whether a
file is what its name claims. Reads only headers (a GGUF's metadata, a folder's config.json), so
bad input and impossible lengths exit 2 before the slow part of a run. A GGUF header is read and
checked whole by specbench_cli/gguf_header.py (the llama.cpp target's one reader too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from specbench_cli.errors import UsageError
from specbench_cli.gguf_header import check_gguf
from specbench_cli.jsonl import read_json

# config.json keys that name a context length, in the order transformers' families use them
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def gguf_metadata(path: Path, wanted: tuple[str, ...] = ()) -> dict[str, Any]:
    """The GGUF file's scalar and string metadata (`wanted`: keys the caller reads; every such
    value is there when the file holds it). UsageError when the file is not a GGUF file, its header
    is cut short or damaged, or it does not describe a model specbench can load (gguf_header.py)."""
    return dict(check_gguf(path).metadata)


def gguf_context_length(path: Path) -> Optional[int]:
    meta = gguf_metadata(path)
    arch = meta.get("general.architecture")
    value = meta.get(f"{arch}.context_length") if arch else None
    return int(value) if isinstance(value, int) and value > 0 else None


def config_context_length(config: dict) -> Optional[int]:
    """The context length a config (dict) declares, if any (text configs of multimodal models included)."""
    for cfg in (config, config.get("text_config") or {}):
        if not isinstance(cfg, dict):
            continue
        for key in CONTEXT_KEYS:
            v = cfg.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def folder_context_length(folder: Path) -> Optional[int]:
    path = Path(folder) / "config.json"
    if not path.exists() and not path.is_symlink():
        return None
    config = read_json(path, "model config")  # bounded: size, UTF-8, nesting; one line naming the file
    if not isinstance(config, dict):
        raise UsageError(f"{path} must hold a JSON object, not {type(config).__name__}")
    return config_context_length(config)


def model_context_length(model: Any) -> Optional[int]:
    """The loaded model's context length (from its config), if it declares one."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    return config_context_length(config.to_dict() if hasattr(config, "to_dict") else dict(vars(config)))
