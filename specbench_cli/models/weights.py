"""Weight files recognised by their bytes, and safetensors headers read without loading tensors:
a pickle renamed `.safetensors`, a truncated download or a wrong shape is one line (naming the
file and the key) before any model loads."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.models.safetensors_check import MAX_HEADER, read_header


def file_kind(path: Path) -> str:
    """'safetensors', 'torch-zip' (torch.save's zip), 'pickle' (legacy torch.save), 'gguf',
    'empty' or 'unknown', from the first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    if not head:
        return "empty"
    if head[:4] == b"GGUF":
        return "gguf"
    if head[:4] == b"PK\x03\x04" and zipfile.is_zipfile(path):
        return "torch-zip"
    if len(head) >= 9:  # before the pickle test: a header length can start with 0x80 0x02
        n = struct.unpack("<Q", head[:8])[0]
        if 2 <= n <= MAX_HEADER and head[8:9] == b"{":
            return "safetensors"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"
    return "unknown"


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{key: (dtype, shape)} of a safetensors file, checked against the file's length; UsageError
    naming the file when it is not a whole safetensors file (a pickle says so and how to convert)."""
    path = Path(path)
    kind = file_kind(path)
    if kind in ("torch-zip", "pickle"):
        raise UsageError(f"{path} is a PyTorch pickle, not safetensors (renamed?); specbench reads pickles only "
                         f"through 'specbench heads import', which converts them once")
    if kind != "safetensors":
        raise UsageError(f"{path} is not a safetensors file ({kind} content)")
    return {key: (info["dtype"], tuple(info["shape"])) for key, info in read_header(path).items()}


FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def check_state_shapes(path: Path, found: dict[str, tuple[str, tuple[int, ...]]], expected: dict[str, Any],
                       ignore: tuple[str, ...] = (), dtypes: dict[str, tuple[str, ...]] | None = None) -> None:
    """Every expected key present with its shape, no unexpected key; `expected` maps key ->
    shape (tuple or torch.Size); `dtypes` the accepted safetensors dtypes of keys that are not
    float (index buffers). One line naming the first offending key."""
    for key, shape in expected.items():
        if key not in found:
            raise UsageError(f"{path}: missing tensor '{key}' (shape {list(shape)})")
        if tuple(found[key][1]) != tuple(shape):
            raise UsageError(f"{path}: tensor '{key}' has shape {list(found[key][1])}, expected {list(shape)}")
        wanted = (dtypes or {}).get(key, FLOAT_DTYPES)
        if found[key][0] not in wanted:
            kind = "a float type" if wanted is FLOAT_DTYPES else " or ".join(wanted)
            raise UsageError(f"{path}: tensor '{key}' has dtype {found[key][0]}, expected {kind}")
    extra = [k for k in found if k not in expected and not k.startswith(ignore)]
    if extra:
        raise UsageError(f"{path}: unexpected tensor '{extra[0]}'" + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))


# Ceilings on the sizes a model or head config declares: above any real model by far, so a
# damaged or hostile config (`"vocab_size": 1000000000000000`) is refused before anything is built.
CONFIG_CEILINGS = {"vocab_size": 1 << 24, "draft_vocab_size": 1 << 24, "hidden_size": 1 << 17,
                   "target_hidden_size": 1 << 17, "intermediate_size": 1 << 20, "num_hidden_layers": 1024,
                   "num_attention_heads": 4096, "num_key_value_heads": 4096, "head_dim": 1 << 14,
                   "max_position_embeddings": 1 << 24, "medusa_num_heads": 256, "medusa_num_layers": 256,
                   "hydra_num_heads": 256, "hydra_num_layers": 256}


def check_config_sizes(config: dict, where: Any) -> None:
    """Every size `config` declares is at most its ceiling (CONFIG_CEILINGS); UsageError naming
    `where` and the key otherwise."""
    for key, ceiling in CONFIG_CEILINGS.items():
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > ceiling:
            raise UsageError(f"{where}: '{key}' is {value}, more than any model has (at most {ceiling})")


def check_finite(state: dict, where: Any) -> None:
    """Every floating-point tensor of `state` ({key: tensor}) is finite; UsageError naming
    `where` and the first tensor holding NaN or infinity (such weights would draft garbage, or
    NaN logits, without a word)."""
    import torch

    for key, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            what = "NaN" if bool(torch.isnan(tensor).any()) else "infinite"
            raise UsageError(f"{where}: tensor '{key}' holds {what} values")


def check_finite_file(path: Path, where: Any = None) -> None:
    """`check_finite` for a safetensors file, one tensor at a time."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():
            check_finite({key: f.get_tensor(key)}, where or path)
