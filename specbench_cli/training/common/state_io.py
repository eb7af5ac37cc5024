"""Trainer state (optimizer, scheduler, RNG, step, history) on disk without pickle.

A checkpoint folder may come from anyone (downloaded, shared), so reading it must never run
code: `torch.load` of a pickle can. The state is split in two files instead:

- `trainer_state.safetensors`: every tensor (optimizer moments, torch RNG state, numpy RNG key),
  flat, under generated names `t0`, `t1`, ...;
- `trainer_state.json`: everything else, with each tensor replaced by a reference to its name.

JSON cannot hold tuples, non-string dict keys or numpy arrays, and the optimizer / RNG states
use all three, so values are tagged: {"__tensor__": name}, {"__ndarray__": name},
{"__tuple__": [...]}, {"__dict__": [[key, value], ...]}. Anything else (an object, a function)
is refused when saving rather than silently dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError

TENSORS_FILE = "trainer_state.safetensors"
JSON_FILE = "trainer_state.json"
LEGACY_FILE = "trainer_state.pt"  # written by specbench <= 0.1.0 (a pickle)
FORMAT = 1
_TAGS = ("__tensor__", "__ndarray__", "__tuple__", "__dict__")


def _encode(value: Any, tensors: dict) -> Any:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = value.detach().cpu().contiguous().clone()  # clone: no shared storage in safetensors
        return {"__tensor__": name}
    if isinstance(value, np.ndarray):
        name = f"t{len(tensors)}"
        tensors[name] = torch.from_numpy(np.ascontiguousarray(value).copy())
        return {"__ndarray__": name}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and k not in _TAGS for k in value):
            return {k: _encode(v, tensors) for k, v in value.items()}
        return {"__dict__": [[_encode(k, tensors), _encode(v, tensors)] for k, v in value.items()]}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"trainer state holds a {type(value).__name__}, which cannot be saved without pickle")


def _decode(value: Any, tensors: dict, where: Path) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, where) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, inner), = value.items()
        if tag in ("__tensor__", "__ndarray__"):
            if not isinstance(inner, str) or inner not in tensors:
                raise UsageError(f"{where}: trainer state refers to a missing tensor {inner!r}")
            return tensors[inner] if tag == "__tensor__" else tensors[inner].numpy()
        if tag == "__tuple__" and isinstance(inner, list):
            return tuple(_decode(v, tensors, where) for v in inner)
        if tag == "__dict__" and isinstance(inner, list):
            if not all(isinstance(kv, list) and len(kv) == 2 for kv in inner):
                raise UsageError(f"{where}: malformed dict entry in the trainer state")
            return {_decode(k, tensors, where): _decode(v, tensors, where) for k, v in inner}
    return {k: _decode(v, tensors, where) for k, v in value.items()}


def save_state(folder: Path, state: dict) -> None:
    """Write `state` (nested dicts/lists/tuples of tensors, numpy arrays and JSON scalars)."""
    from safetensors.torch import save_file

    tensors: dict = {}
    body = {"format": FORMAT, "state": _encode(state, tensors)}
    save_file(tensors, str(Path(folder) / TENSORS_FILE))
    (Path(folder) / JSON_FILE).write_text(json.dumps(body) + "\n", encoding="utf-8")


def has_state(folder: Path) -> bool:
    folder = Path(folder)
    return (folder / JSON_FILE).is_file() or (folder / LEGACY_FILE).is_file()


def load_state(folder: Path) -> dict:
    """Read the trainer state of a checkpoint folder without executing anything from it.

    Old checkpoints (`trainer_state.pt`) are read with `torch.load(weights_only=True)`, which
    only rebuilds tensors and plain containers; one that needs more is refused (exit 2)."""
    folder = Path(folder)
    if not (folder / JSON_FILE).is_file() and (folder / LEGACY_FILE).is_file():
        return _load_legacy(folder / LEGACY_FILE)
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = folder / JSON_FILE
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        tensors = load_file(str(folder / TENSORS_FILE))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SafetensorError) as e:
        raise UsageError(f"cannot read the trainer state in {folder}: {str(e).splitlines()[0]}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("state"), dict):
        raise UsageError(f"{path} is not a specbench trainer state (format {FORMAT})")
    state = _decode(body["state"], tensors, path)
    missing = [k for k in ("step", "optimizer", "scheduler", "rng", "history") if k not in state]
    if missing or not isinstance(state["step"], int):
        raise UsageError(f"{path}: trainer state lacks {', '.join(missing) or 'an integer step'}")
    return state


def _numpy_rng_globals() -> list:
    """What an old state's numpy RNG key (a uint32 ndarray) needs besides torch's allowlist: array
    reconstruction and dtypes only. Object arrays would need further globals, so stay refused."""
    import numpy as np

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    return [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def _load_legacy(path: Path) -> dict:
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_numpy_rng_globals()):
            state = torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as e:
        raise UsageError(f"refusing {path}: it holds more than tensors and plain data, and loading it could run "
                         f"code ({type(e).__name__})") from None
    if not isinstance(state, dict):
        raise UsageError(f"{path} does not hold a trainer state")
    return state
