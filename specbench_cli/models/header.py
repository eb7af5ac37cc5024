"""What a model reference declares before its weights load: the context length, and whether a
file is what its name claims. Reads only headers (a GGUF's metadata, a folder's config.json), so
bad input and impossible lengths exit 2 before the slow part of a run."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, BinaryIO, Optional

from specbench_cli.errors import UsageError

GGUF_MAGIC = b"GGUF"
# GGUF metadata value types: (struct format, size) for the fixed-size ones
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
            6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_STRING, _ARRAY = 8, 9
# config.json keys that name a context length, in the order transformers' families use them
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


class _Truncated(Exception):
    pass


def _read(f: BinaryIO, n: int) -> bytes:
    b = f.read(n)
    if len(b) != n:
        raise _Truncated
    return b


def _value(f: BinaryIO, vtype: int, keep: bool) -> Any:
    if vtype in _SCALARS:
        fmt, size = _SCALARS[vtype]
        return struct.unpack(fmt, _read(f, size))[0]
    if vtype == _STRING:
        (n,) = struct.unpack("<Q", _read(f, 8))
        if n > 1 << 24:
            raise ValueError(f"a metadata string of {n} bytes")
        raw = _read(f, n)
        return raw.decode("utf-8", "replace") if keep else None
    if vtype == _ARRAY:
        (itype,) = struct.unpack("<I", _read(f, 4))
        (n,) = struct.unpack("<Q", _read(f, 8))
        if itype in _SCALARS:  # skip fixed-size arrays in one seek
            f.seek(n * _SCALARS[itype][1], 1)
            return None
        if n > 1 << 26:
            raise ValueError(f"a metadata array of {n} entries")
        for _ in range(n):
            _value(f, itype, False)
        return None
    raise ValueError(f"unknown metadata type {vtype}")


def gguf_metadata(path: Path, wanted: tuple[str, ...] = ()) -> dict[str, Any]:
    """The GGUF file's scalar metadata (and the string values of `wanted` keys); UsageError when
    the file is not a GGUF file or its header is cut short. Reads until every wanted key is found."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(4) != GGUF_MAGIC:
                raise UsageError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
            version, = struct.unpack("<I", _read(f, 4))
            if version < 2:
                raise UsageError(f"{path}: GGUF version {version} is not supported (2 or later)")
            _tensors, n_kv = struct.unpack("<QQ", _read(f, 16))
            meta: dict[str, Any] = {"general.version": version}
            for _ in range(n_kv):
                (klen,) = struct.unpack("<Q", _read(f, 8))
                if klen > 1 << 16:
                    raise ValueError(f"a metadata key of {klen} bytes")
                key = _read(f, klen).decode("utf-8", "replace")
                (vtype,) = struct.unpack("<I", _read(f, 4))
                value = _value(f, vtype, key in wanted or key.endswith(".architecture"))
                if value is not None:
                    meta[key] = value
                if wanted and all(k in meta for k in wanted):
                    break
                if not wanted and f"{meta.get('general.architecture')}.context_length" in meta:
                    break  # the context length is all a run asks of the header
            return meta
    except _Truncated:
        raise UsageError(f"{path}: the GGUF header is cut short (a truncated or damaged file)") from None
    except (ValueError, struct.error) as e:
        raise UsageError(f"{path}: damaged GGUF header ({e})") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None


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
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path} is not readable JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path} must hold a JSON object, not {type(config).__name__}")
    return config_context_length(config)


def model_context_length(model: Any) -> Optional[int]:
    """The loaded model's context length (from its config), if it declares one."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    return config_context_length(config.to_dict() if hasattr(config, "to_dict") else dict(vars(config)))
