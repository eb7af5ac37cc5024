"""A safetensors file's header validated before safetensors or torch sees the file.

The layout: an 8-byte little-endian header length N, N bytes of JSON (an object of
`{"dtype", "shape", "data_offsets": [begin, end]}` per tensor, plus an optional
`"__metadata__"` of strings), then the tensors' bytes, each tensor's `[begin, end)` relative to
the end of the header. The library trusts some of this and fails on the rest with errors that
name no file (a shape of [2^31, 2^31] is a `SafetensorError` about an overflow), and JSON nested
200,000 deep reaches a recursive parser. `read_header` checks all of it with exact integers: the
length against the cap and the file, the nesting bound (specbench_cli/jsonl.py), every dtype
known, every shape a list of non-negative integers, every tensor's bytes exactly
prod(shape) x item size, the tensors tiling the data without gap or overlap and ending where the
file ends. One UsageError naming the file otherwise.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import MAX_JSON_DEPTH, too_deep

MAX_HEADER = 100 << 20  # safetensors caps its JSON header at 100 MB
# bytes per element of every dtype the safetensors format names (sub-byte float types excluded:
# no head is stored in them)
ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
              "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
ENTRY_KEYS = {"dtype", "shape", "data_offsets"}


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unique(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"the key {twice!r} appears twice")
    return dict(pairs)


def read_header(path: Path) -> dict[str, dict]:
    """{key: {"dtype", "shape", "data_offsets"}} of the safetensors file `path` (no
    "__metadata__"), every entry checked against the file (see the module's docstring);
    UsageError naming the file and the first thing wrong."""
    path = Path(path)

    def bad(why: str) -> UsageError:
        return UsageError(f"{path}: not a valid safetensors file ({why})")

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise bad(f"{size} bytes, shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise bad(f"a header of {n} bytes, more than the {MAX_HEADER >> 20} MB safetensors allows")
            if 8 + n > size:
                raise bad(f"a header of {n} bytes in a file of {size} (truncated or damaged)")
            raw = f.read(n)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("its header is not UTF-8 text") from None
    if too_deep(text):
        raise bad(f"its header nests JSON deeper than {MAX_JSON_DEPTH} levels")
    try:
        header = json.loads(text, object_pairs_hook=_unique)
    except (ValueError, RecursionError) as e:
        raise bad(f"its header is not JSON: {str(e).splitlines()[0] if str(e) else 'nested too deeply'}") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise bad("'__metadata__' must map names to strings")
    data = size - 8 - n
    spans = []
    for key, info in header.items():
        where = f"tensor '{key}'"
        if not isinstance(info, dict) or not ENTRY_KEYS <= set(info):
            raise bad(f"{where}: an entry must hold dtype, shape and data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in ITEM_BYTES:
            raise bad(f"{where}: unknown dtype {json.dumps(dtype)[:40]}")
        if not isinstance(shape, list) or not all(_int(d) and d >= 0 for d in shape):
            raise bad(f"{where}: the shape must be a list of non-negative integers, got {json.dumps(shape)[:80]}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_int(o) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise bad(f"{where}: data_offsets must be two integers 0 <= begin <= end, got {json.dumps(offsets)[:80]}")
        count = 1
        for d in shape:  # Python integers: [2^31, 2^31] is 2^62 elements, not an overflow
            count *= d
        begin, end = offsets
        if end - begin != count * ITEM_BYTES[dtype]:
            raise bad(f"{where}: shape {shape} of {dtype} is {count * ITEM_BYTES[dtype]} bytes, its data_offsets "
                      f"hold {end - begin}")
        if end > data:
            raise bad(f"{where} ends at byte {end} of the data, the file holds {data} (truncated or damaged)")
        spans.append((begin, end, key))
    at = 0
    for begin, end, key in sorted(spans):
        if begin != at:
            raise bad(f"tensor '{key}' starts at byte {begin} of the data, expected {at} (tensors overlap or leave a gap)")
        at = end
    if at != data:
        raise UsageError(f"{path} is {size} bytes but its header describes {8 + n + at} (truncated or damaged)")
    return header
