"""What every importer shares: its record, and reading a published folder's config and tensors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple

from specbench_cli.errors import UsageError


class Importer(NamedTuple):
    name: str                                  # the published layout, as users call it
    detect: Callable[[Path], bool]             # cheap: file names and config keys only
    convert: Callable[[Path, Path], dict]      # (src, out) -> a summary for the user


def read_config(src: Path) -> dict:
    """The published folder's `config.json` as an object, read through the bounded JSON reader
    (size, special files, nesting depth: specbench_cli/jsonl.py); UsageError naming the file."""
    from specbench_cli.jsonl import read_json

    path = src / "config.json"
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"{src} has no config.json (a published heads folder has one)")
    cfg = read_json(path, "heads config")
    if not isinstance(cfg, dict):
        raise UsageError(f"{path} must hold a JSON object, not {type(cfg).__name__}")
    return cfg


def read_tensors(path: Path) -> dict[str, Any]:
    """{key: tensor} from a safetensors file or a PyTorch pickle (weights only: no code runs)."""
    import torch
    from safetensors.torch import load_file

    from specbench_cli.models.weights import file_kind, safetensors_header

    kind = file_kind(path)
    if kind == "safetensors" or path.suffix == ".safetensors":  # a pickle named .safetensors is refused
        safetensors_header(path)  # whole, not truncated
        return load_file(str(path))
    if kind not in ("torch-zip", "pickle"):
        raise UsageError(f"{path} is neither safetensors nor a PyTorch checkpoint ({kind} content)")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any refusal (code in the pickle, damage) is the file's problem
        raise UsageError(f"{path}: not a plain tensor checkpoint ({str(e).splitlines()[0][:160]})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise UsageError(f"{path}: expected a mapping of names to tensors")
    return state


def first_file(src: Path, names: tuple[str, ...]) -> Path | None:
    return next((src / n for n in names if (src / n).is_file()), None)
