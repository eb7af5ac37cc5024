"""Heads folders: `config.json` + safetensors, read and written without running code.

Kinds and their weight files: Medusa (`medusa_lm_head.safetensors`, FasterDecoding's v2 / TGI
keys, or Medusa-1's own projections), EAGLE-1/2 and EAGLE-3 (`model.safetensors`, SafeAILab's
keys), Hydra (`hydra_heads.safetensors`, methods/heads/hydra.py). `inspect_heads` checks a folder
without loading tensors (config typed, file bytes and header, every key and shape against the
head its config describes), so a bad folder is one line and exit 2 before the target loads;
`load_heads` then builds the head and binds it to the target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.hydra import HYDRA_FILE
from specbench_cli.methods.heads.model import EagleHead, MedusaHeads, count_params

MEDUSA_FILE = "medusa_lm_head.safetensors"
EAGLE_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
VOCAB_FILE = "draft_vocab.safetensors"  # {"ids": int64 [V'] sorted target ids}: the training sub-vocabulary
FILES = {"medusa": MEDUSA_FILE, "eagle": EAGLE_FILE, "eagle3": EAGLE_FILE, "hydra": HYDRA_FILE}


def save_heads(head: nn.Module, folder: Path, meta: dict, vocab: torch.Tensor | None = None) -> Path:
    """Write `config.json` (public fields + "specbench": meta) and the head's safetensors; with
    `vocab` (sorted target ids [V']) also `draft_vocab.safetensors`, the draft vocabulary the
    methods use by default (the head was trained to rank tokens within it)."""
    from safetensors.torch import save_file

    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    cfg = {**head.config_dict(), "specbench": {**meta, "kind": head.kind, "layers": head.n_layers,
                                               "params": count_params(head)}}
    if head.kind in ("medusa", "hydra"):
        cfg["specbench"]["heads"] = head.n_heads
    save_file(state, str(folder / FILES[head.kind]), metadata={"format": "pt"})
    if vocab is not None:
        save_file({"ids": vocab.detach().to(torch.long).contiguous().cpu()}, str(folder / VOCAB_FILE))
    atomic_write(folder / CONFIG_FILE, json.dumps(cfg, indent=2, default=str) + "\n")
    return folder


def load_draft_vocab(folder: Path) -> torch.Tensor | None:
    """Sorted target ids [V'] from `draft_vocab.safetensors`, or None when the folder has none;
    UsageError when the file is not a 1-D sorted, duplicate-free, non-negative id list."""
    from safetensors.torch import load_file

    path = Path(folder).expanduser() / VOCAB_FILE
    if not path.is_file():
        return None
    try:
        ids = load_file(str(path))["ids"]
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input problem
        raise UsageError(f"{path}: not a draft vocabulary ({e})") from None
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype != torch.long or int(ids.min()) < 0 \
            or (ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all())):
        raise UsageError(f"{path}: 'ids' must be sorted distinct non-negative int64 token ids")
    return ids


# EAGLE config fields the head is built from: name -> (type, required)
EAGLE_FIELDS = {"hidden_size": (int, True), "intermediate_size": (int, True), "num_hidden_layers": (int, True),
                "num_attention_heads": (int, True), "vocab_size": (int, True), "num_key_value_heads": (int, False),
                "max_position_embeddings": (int, False), "rms_norm_eps": (float, False), "rope_theta": (float, False),
                "head_dim": (int, False)}


def read_heads_config(folder: Path) -> tuple[str, dict]:
    """(kind, config dict) of a heads folder; UsageError naming the file when it is not one
    (missing, not UTF-8, not a JSON object, a field of the wrong type)."""
    folder = Path(folder).expanduser()
    path = folder / CONFIG_FILE
    if not folder.is_dir():
        raise UsageError(f"heads folder not found: {folder}")
    if not path.is_file():
        raise UsageError(f"{folder} is not a heads folder (no {CONFIG_FILE})")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
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
    if not any((folder / f).is_file() for f in (MEDUSA_FILE, EAGLE_FILE, HYDRA_FILE)):
        pickled = [n for n in ("medusa_lm_head.pt", "pytorch_model.bin", "medusa_lm_head.bin", "hydra_lm_head.pt")
                   if (folder / n).is_file()]
        if pickled:
            raise UsageError(f"{folder} holds published pickled weights ({pickled[0]}); convert them once: "
                             f"specbench heads import {folder} --out DIR")
    if (folder / MEDUSA_FILE).is_file():
        return "medusa", cfg
    if (folder / HYDRA_FILE).is_file():
        from specbench_cli.methods.heads.hydra import hydra_fields

        hydra_fields(cfg, path)
        return "hydra", cfg
    if (folder / EAGLE_FILE).is_file() and "num_hidden_layers" in cfg:
        eagle3 = "draft_vocab_size" in cfg
        fields = {**EAGLE_FIELDS, "draft_vocab_size": (int, True), "target_hidden_size": (int, False)} \
            if eagle3 else EAGLE_FIELDS
        for key, (typ, required) in fields.items():
            value = cfg.get(key)
            if value is None and not required:
                continue
            ok = isinstance(value, typ) or (typ is float and isinstance(value, int))
            if not ok or isinstance(value, bool) or not value > 0:
                raise UsageError(f"{path}: '{key}' must be a positive {typ.__name__}, got {json.dumps(value)}")
        if eagle3:
            layers = cfg.get("feature_layers")
            if layers is not None and not (isinstance(layers, list) and len(layers) == 3 and all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)):
                raise UsageError(f"{path}: 'feature_layers' must be three layer indices, got {json.dumps(layers)}")
            if cfg["num_hidden_layers"] != 1:
                raise UsageError(f"{path}: an EAGLE-3 head has one layer (num_hidden_layers 1), got "
                                 f"{cfg['num_hidden_layers']}")
            return "eagle3", cfg
        return "eagle", cfg
    raise UsageError(f"{folder} holds none of {MEDUSA_FILE}, {HYDRA_FILE} or an EAGLE {EAGLE_FILE}")


def _medusa_layout(path: Path, found: dict) -> tuple[int, int, int, int | None]:
    """(hidden, heads, layers, own vocabulary or None) from Medusa keys: `{head}.{layer}.linear.*`
    (v2 / TGI), plus `{head}.{layers}.weight` [V, h] per head (Medusa-1's own projections)."""
    blocks, projections = [], []
    for key in found:
        parts = key.split(".")
        if len(parts) == 4 and parts[2] == "linear" and parts[0].isdigit() and parts[1].isdigit():
            blocks.append((int(parts[0]), int(parts[1])))
        elif len(parts) == 3 and parts[2] == "weight" and parts[0].isdigit() and parts[1].isdigit():
            projections.append((int(parts[0]), int(parts[1])))
        else:
            raise UsageError(f"{path}: tensor '{key}' is not a Medusa key ({{head}}.{{layer}}.linear.* or "
                             f"{{head}}.{{layers}}.weight)")
    if "0.0.linear.weight" not in found:
        raise UsageError(f"{path}: missing tensor '0.0.linear.weight'")
    hidden = found["0.0.linear.weight"][1][0]
    heads, layers = 1 + max(p[0] for p in blocks), 1 + max(p[1] for p in blocks)
    vocab = None
    if projections:
        if any(j != layers for _, j in projections):
            raise UsageError(f"{path}: tensor '{projections[0][0]}.{projections[0][1]}.weight' is not after the last "
                             f"block (Medusa-1 projections are {{head}}.{layers}.weight)")
        vocab = found[f"0.{layers}.weight"][1][0] if f"0.{layers}.weight" in found else None
        if vocab is None:
            raise UsageError(f"{path}: missing tensor '0.{layers}.weight'")
    return hidden, heads, layers, vocab


def _build(kind: str, cfg: dict, layout: tuple[int, int, int] | None, target_config: Any = None,
           header: dict | None = None) -> nn.Module:
    from transformers import LlamaConfig

    if kind == "medusa":
        hidden, n_heads, n_layers, vocab = layout
        return MedusaHeads(hidden, n_heads, n_layers, vocab)
    if kind == "hydra":
        from specbench_cli.methods.heads.hydra import build_hydra

        return build_hydra(cfg, target_config, header)
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k != "specbench"})
    if kind == "eagle3":
        from specbench_cli.methods.heads.eagle3 import Eagle3Head

        return Eagle3Head(config)
    return EagleHead(config)


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
    path = folder / FILES[kind]
    found = safetensors_header(path)
    layout = _medusa_layout(path, found) if kind == "medusa" else None
    try:
        with torch.device("meta"):
            module = _build(kind, cfg, layout, header=found)
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

    Medusa: the head and layer counts come from the tensor keys (public configs can lie about
    them); Medusa-1's own per-head projections (`{i}.{K}.weight`) are kept. Hydra: the prefix
    layer takes the target's attention geometry, norm epsilon and RoPE when a target is given
    (UsageError when its shapes do not match the file's).
    """
    from safetensors.torch import load_file

    folder = Path(folder).expanduser()
    kind, cfg = inspect_heads(folder)
    path = folder / FILES[kind]
    state = {k: v for k, v in load_file(str(path)).items() if not k.startswith("embed_tokens.")}
    from specbench_cli.models.weights import check_finite

    check_finite(state, path)
    layout = _medusa_layout(path, {k: (str(v.dtype), tuple(v.shape)) for k, v in state.items()}) \
        if kind == "medusa" else None
    head = _build(kind, cfg, layout, target_config=getattr(target, "config", None),
                  header={k: (str(v.dtype), tuple(v.shape)) for k, v in state.items()})
    if kind == "hydra":  # the prefix layer was rebuilt from the target's config: the same shapes?
        for key, shape in _expected(head)[0].items():
            if key in state and tuple(state[key].shape) != tuple(shape):
                raise UsageError(f"{path}: tensor '{key}' has shape {list(state[key].shape)}, this target's "
                                 f"prefix layer needs {list(shape)}: heads made for another model")
    head.load_state_dict(state, strict=False)  # keys and shapes were checked by inspect_heads
    head.to(dtype).eval()
    head.meta = cfg.get("specbench", {})
    return head.bind(target) if target is not None else head
