"""Heads folders: `config.json` + safetensors, read and written without running code.

Each kind's weight file, config fields and head module are its declaration's
(methods/heads/<kind>/kind.py). `write_heads_folder` is the one writer of a heads folder (the
trainer's `save_heads` and every importer go through it); `inspect_heads` checks a folder without
loading tensors (config typed, file bytes and header, every key and shape against the head its
config describes), so a bad folder is one line and exit 2 before the target loads; `load_heads` then
builds the head and binds it to the target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import UsageError
from specbench_cli.methods.heads import kinds
from specbench_cli.methods.heads.model import count_params

CONFIG_FILE = "config.json"
VOCAB_FILE = "draft_vocab.safetensors"  # {"ids": int64 [V'] sorted target ids}: the training sub-vocabulary


def write_heads_folder(folder: Path, kind: str, state: dict, config: dict, vocab: torch.Tensor | None = None,
                       atomic: bool = False, json_default=None) -> Path:
    """The one writer of a heads folder: kind `kind`'s weight file (safetensors of `state`),
    `config.json` (`config`, whose "specbench" object records at least the kind) and, with
    `vocab` (sorted target ids [V']), `draft_vocab.safetensors`, the draft vocabulary the
    methods use by default. `atomic`: the weight file is written through a temporary file too
    (importers, which may overwrite a folder); config.json always is, last."""
    from safetensors.torch import save_file

    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / kinds.get(kind).weights
    if atomic:
        atomic_write(weights, lambda tmp: save_file(state, str(tmp), metadata={"format": "pt"}))
    else:
        save_file(state, str(weights), metadata={"format": "pt"})
    if vocab is not None:
        save_file({"ids": vocab.detach().to(torch.long).contiguous().cpu()}, str(folder / VOCAB_FILE))
    atomic_write(folder / CONFIG_FILE, json.dumps(config, indent=2, default=json_default) + "\n")
    return folder


def save_heads(head: nn.Module, folder: Path, meta: dict, vocab: torch.Tensor | None = None) -> Path:
    """A trained head's folder: its config (public fields + "specbench": meta, kind, shape,
    parameter count) and weights; `vocab` as in `write_heads_folder` (the head was trained to rank
    tokens within it)."""
    state = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    cfg = {**head.config_dict(), "specbench": {**meta, "kind": head.kind, "layers": head.n_layers,
                                               "params": count_params(head)}}
    if hasattr(head, "n_heads"):  # Medusa's and Hydra's head count
        cfg["specbench"]["heads"] = head.n_heads
    return write_heads_folder(folder, head.kind, state, cfg, vocab, json_default=str)


def load_draft_vocab(folder: Path) -> torch.Tensor | None:
    """Sorted target ids [V'] from `draft_vocab.safetensors`, or None when the folder has none;
    UsageError when the file is not a 1-D sorted, duplicate-free, non-negative id list."""
    from safetensors.torch import load_file

    path = Path(folder).expanduser() / VOCAB_FILE
    if not path.is_file():
        return None
    from specbench_cli.models.weights import safetensors_header

    safetensors_header(path)  # the header checked before the library reads the file
    try:
        ids = load_file(str(path))["ids"]
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input problem
        raise UsageError(f"{path}: not a draft vocabulary ({e})") from None
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype != torch.long or int(ids.min()) < 0 \
            or (ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all())):
        raise UsageError(f"{path}: 'ids' must be sorted distinct non-negative int64 token ids")
    return ids


def read_heads_config(folder: Path) -> tuple[str, dict]:
    """(kind, config dict) of a heads folder; UsageError naming the file when it is not one
    (missing, not UTF-8, not a JSON object, a field of the wrong type)."""
    folder = Path(folder).expanduser()
    path = folder / CONFIG_FILE
    if folder.exists() and not folder.is_dir():  # "not found" for a file that exists misled
        raise UsageError(f"{folder} is a file, not a heads folder (a folder holding {CONFIG_FILE} and the weights)")
    if not folder.is_dir():
        raise UsageError(f"heads folder not found: {folder}")
    if not path.is_file():
        raise UsageError(f"{folder} is not a heads folder (no {CONFIG_FILE})")
    from specbench_cli.jsonl import MAX_CONFIG_BYTES, loads, read_bytes

    try:  # the bounded reader: size, special files and nesting depth checked before parsing
        cfg = loads(read_bytes(path, "heads config", MAX_CONFIG_BYTES).decode("utf-8"), str(path))
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise UsageError(f"{path} is not valid JSON: {e or 'nested too deeply'}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{path} must hold a JSON object, not {type(cfg).__name__}")
    from specbench_cli.models.weights import check_config_sizes

    check_config_sizes(cfg, path)
    if not isinstance(cfg.get("specbench", {}), dict):
        raise UsageError(f"{path}: 'specbench' must be an object")
    declared = kinds.kinds()
    if not any((folder / k.weights).is_file() for k in declared):
        pickled = [n for n in ("medusa_lm_head.pt", "pytorch_model.bin", "medusa_lm_head.bin", "hydra_lm_head.pt")
                   if (folder / n).is_file()]
        if pickled:
            raise UsageError(f"{folder} holds published pickled weights ({pickled[0]}); convert them once: "
                             f"specbench heads import {folder} --out DIR")
    for k in declared:
        if k.claims(folder, cfg):
            k.check_config(cfg, path)
            return k.name, cfg
    files = [k.weights for k in declared]
    raise UsageError(f"{folder} holds none of {', '.join(dict.fromkeys(files))} (with the config of a heads kind: "
                     f"{', '.join(k.name for k in declared)})")


def _expected(module: nn.Module) -> tuple[dict, dict]:
    """(key -> shape, key -> accepted safetensors dtypes of the non-float keys) of a head."""
    state = {k: v for k, v in module.state_dict().items() if not k.startswith("rotary.") and ".rotary." not in k}
    dtypes = {k: ("BOOL", "U8") if v.dtype == torch.bool else ("I64", "I32")
              for k, v in state.items() if not v.dtype.is_floating_point}
    return {k: v.shape for k, v in state.items()}, dtypes


def inspect_heads(folder: Path) -> tuple[str, dict]:
    """Check a heads folder without loading tensors: config typed, the weight file's bytes and
    header, every key and shape against the head its config describes. (kind, config)."""
    from specbench_cli.models.weights import check_state_shapes, safetensors_header

    folder = Path(folder).expanduser()
    kind, cfg = read_heads_config(folder)
    path = folder / kinds.get(kind).weights
    found = safetensors_header(path)
    try:
        with torch.device("meta"):
            module = kinds.get(kind).build(cfg, found, path, None)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - a config transformers refuses (its own validation errors) is the folder's problem
        raise UsageError(f"{folder / CONFIG_FILE}: does not describe a {kind} head ({str(e).splitlines()[0]})") from None
    expected, dtypes = _expected(module)
    check_state_shapes(path, found, expected, ignore=("embed_tokens.", "rotary."), dtypes=dtypes)
    return kind, cfg


def load_heads(folder: Path, target: Any | None = None, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Load a heads folder (safetensors + JSON only), bound to `target` if given; every key and
    shape is checked (`inspect_heads`) before any tensor loads.

    The kind builds its head from the config and the tensors' header (Medusa's head and layer
    counts come from the keys); a head built with the target's config (Hydra's prefix layer takes
    its attention geometry, norm epsilon and RoPE) must still have the file's shapes (UsageError:
    heads made for another model).
    """
    from safetensors.torch import load_file

    folder = Path(folder).expanduser()
    kind, cfg = inspect_heads(folder)
    path = folder / kinds.get(kind).weights
    state = {k: v for k, v in load_file(str(path)).items() if not k.startswith("embed_tokens.")}
    from specbench_cli.models.weights import check_finite

    check_finite(state, path)
    head = kinds.get(kind).build(cfg, {k: (str(v.dtype), tuple(v.shape)) for k, v in state.items()}, path,
                                 getattr(target, "config", None))
    for key, shape in _expected(head)[0].items():  # built with the target's config: still the file's shapes?
        if key in state and tuple(state[key].shape) != tuple(shape):
            raise UsageError(f"{path}: tensor '{key}' has shape {list(state[key].shape)}, this target's "
                             f"prefix layer needs {list(shape)}: heads made for another model")
    head.load_state_dict(state, strict=False)  # keys and shapes were checked by inspect_heads
    head.to(dtype).eval()
    head.meta = cfg.get("specbench", {})
    return head.bind(target) if target is not None else head
