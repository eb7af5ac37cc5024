"""A GGUF file's header, read and checked before llama.cpp or the converter sees the file.

llama.cpp aborts the whole process (SIGABRT from a `GGML_ASSERT`) on a header it cannot use,
such as a block count of 0 or more than 512, and transformers' GGUF converter builds a model of
whatever size the header declares (a block count of 100000: minutes of initialisation, then out
of memory). So every GGUF file specbench is given is read here first and refused with one line
naming the file and what is wrong (`UsageError`, exit 2):

- structure: the magic, version 2 or 3, key and tensor counts the file can hold, every length
  within the bytes left, known value types, no nested array, no empty or repeated key or tensor
  name, UTF-8 text, a power-of-two `general.alignment`;
- tensors: 1 to 4 dimensions, none 0; a known ggml type whose block divides a row; the bytes at
  an aligned offset, inside the file, overlapping no other tensor;
- the model: an architecture specbench can load (it converts GGUF files with transformers); a
  block count of 1 to 512 equal to the `blk.N` layers whose tensors are present; a vocabulary
  (`tokenizer.ggml.tokens`, no token twice) as long as `token_embd`'s rows, the declared
  `vocab_size` and the scores and types; and the sizes that shape a model (embedding and
  feed-forward lengths, heads, head sizes, rotary dimensions, experts) consistent with the
  tensors that carry them and within llama.cpp's limits.

Reads are bounded: the file is memory-mapped and every count and length is checked against the
bytes left before anything is read or kept, so a header claiming 2^60 keys or a 1 TB string costs
nothing. Tensor data is never read: the embedded model's header is 1.8 MB of its 98 MB.
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from specbench_cli.errors import UsageError, special_kind

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_LAYERS = 512            # llama.cpp's LLAMA_MAX_LAYERS: more is a GGML_ASSERT (an abort)
MAX_EXPERTS = 1024          # llama.cpp's LLAMA_MAX_EXPERTS, likewise
MAX_NAME = 64               # llama.cpp's GGML_MAX_NAME: a tensor name is shorter
MAX_KEYS = 1 << 16          # real files hold < 100 keys
MAX_TENSORS = 1 << 20       # real files hold < 5000 tensors per file
MAX_KEY_BYTES = 1 << 16
MAX_VOCAB = 1 << 21         # real vocabularies hold < 300k tokens; the tokens are kept to find repeats
MAX_STRINGS = 1 << 23       # strings in all arrays together (tokens, merges): each is one Python step
KEEP_ARRAY = 4096           # numeric arrays up to this long keep their values (per-layer sizes)

# GGUF value types: (struct format, size) of the fixed-size ones
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
            6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_INTS = (0, 1, 2, 3, 4, 5, 10, 11)
_STRING, _ARRAY, _UINT32, _INT32, _FLOAT32 = 8, 9, 4, 5, 6

# ggml tensor types of llama.cpp's release: number -> (name, elements per block, bytes per block).
# Numbers missing here (4, 5, 31-33, 36-38) are types ggml removed; llama.cpp refuses them too.
GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36), 10: ("q2_K", 256, 84),
    11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210),
    15: ("q8_K", 256, 292), 16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98),
    19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110), 22: ("iq2_s", 256, 82),
    23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2), 26: ("i32", 1, 4), 27: ("i64", 1, 8),
    28: ("f64", 1, 8), 29: ("iq1_m", 256, 56), 30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54),
    35: ("tq2_0", 256, 66), 39: ("mxfp4", 32, 17), 40: ("nvfp4", 64, 36), 41: ("q1_0", 128, 18),
    42: ("q2_0", 64, 18),
}

# `general.architecture` values specbench loads: decoder-only models transformers' GGUF converter
# reads (the tokenizer is converted on every target, the weights on the transformers target)
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gpt-oss", "lfm2",
                 "falcon", "phi3", "bloom", "stablelm", "gpt2", "starcoder2", "mamba", "nemotron",
                 "gemma2", "gemma3", "gemma4", "deci", "minimax-m2")
# architectures whose llama.cpp graph asserts that the rotary dimensions equal the head size
_ROPE_IS_HEAD = ("llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "falcon", "starcoder2", "deci")
ROPE_SCALING = ("none", "linear", "yarn", "longrope")  # llama.cpp asserts on any other name

_BLOCK = re.compile(r"blk\.(\d+)\.")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor's entry: `shape` in GGUF order (ne[0] first: a matrix is [columns, rows])."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int   # from the start of the data section
    nbytes: int


@dataclass
class GGUFHeader:
    """What a GGUF file's header says. `metadata`: every scalar and string value, and numeric
    arrays of up to KEEP_ARRAY entries as tuples; `arrays`: every array's (element type, length)."""

    path: Path
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    types: dict[str, int] = field(default_factory=dict)
    arrays: dict[str, tuple[int, int]] = field(default_factory=dict)
    tensors: dict[str, GGUFTensor] = field(default_factory=dict)
    alignment: int = DEFAULT_ALIGNMENT
    data_start: int = 0
    file_size: int = 0

    @property
    def architecture(self) -> Optional[str]:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None


class _Cut(Exception):
    """The header runs past the end of the file."""


class _Damaged(Exception):
    """The header says something impossible (the message says what)."""


class _Reader:
    """Bounded reads from a memory-mapped file: every read checks the bytes left first."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0
        self.strings = 0

    def left(self) -> int:
        return self.size - self.pos

    def unpack(self, fmt: str, n: int) -> Any:
        if self.pos + n > self.size:
            raise _Cut
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def raw_string(self, what: str, limit: Optional[int] = None) -> bytes:
        n = self.unpack("<Q", 8)
        if limit is not None and n > limit:
            raise _Damaged(f"{what} is {n} bytes long (at most {limit})")
        if n > self.left():
            raise _Damaged(f"{what} is {n} bytes long, more than the {self.left()} bytes left in the file")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def text(self, what: str, limit: Optional[int] = None) -> str:
        raw = self.raw_string(what, limit)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Damaged(f"{what} is not UTF-8 text") from None


def _value(r: _Reader, key: str, vtype: int, h: GGUFHeader) -> Any:
    """Read one value of type `vtype` (an array's elements are checked, kept when small)."""
    if vtype in _SCALARS:
        fmt, size = _SCALARS[vtype]
        return r.unpack(fmt, size)
    if vtype == _STRING:
        return r.text(f"the value of {key}")
    if vtype != _ARRAY:
        raise _Damaged(f"key {key} has unknown value type {vtype}")
    itype = r.unpack("<I", 4)
    n = r.unpack("<Q", 8)
    h.arrays[key] = (itype, n)
    if itype in _SCALARS:
        fmt, size = _SCALARS[itype]
        if n * size > r.left():
            raise _Damaged(f"{key} claims {n} entries of {size} bytes, more than the {r.left()} bytes left in the file")
        start = r.pos
        r.pos += n * size
        if n <= KEEP_ARRAY:
            return struct.unpack_from(f"<{n}{fmt[1]}", r.buf, start)
        return None
    if itype != _STRING:
        raise _Damaged(f"{key} is an array of {'arrays' if itype == _ARRAY else f'unknown type {itype}'}")
    if n * 8 > r.left():
        raise _Damaged(f"{key} claims {n} strings, more than the {r.left()} bytes left in the file can hold")
    r.strings += n
    if r.strings > MAX_STRINGS:
        raise _Damaged(f"{key} brings the header's strings to {r.strings} (at most {MAX_STRINGS})")
    keep = key == "tokenizer.ggml.tokens"
    if keep and n > MAX_VOCAB:
        raise _Damaged(f"{key} holds {n} tokens (at most {MAX_VOCAB})")
    out: list[str] = []
    buf, pos, size, length = r.buf, r.pos, r.size, _U64.unpack_from
    for i in range(n):  # the hot loop of a header (100k strings in the embedded model), inlined
        if pos + 8 > size:
            raise _Cut
        (ln,) = length(buf, pos)
        pos += 8
        if ln > size - pos:
            raise _Damaged(f"{key}[{i}] is {ln} bytes long, more than the {size - pos} bytes left in the file")
        try:
            text = buf[pos:pos + ln].decode("utf-8")
        except UnicodeDecodeError:
            raise _Damaged(f"{key}[{i}] is not UTF-8 text") from None
        pos += ln
        if keep:
            out.append(text)
    r.pos = pos
    return out if keep else None


def _parse(path: Path, buf: Any, size: int) -> GGUFHeader:
    r = _Reader(buf, size)
    if size < 4 or bytes(buf[:4]) != MAGIC:
        raise UsageError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
    r.pos = 4
    version = r.unpack("<I", 4)
    if version not in VERSIONS:
        raise UsageError(f"{path}: GGUF version {version} is not supported (2 or 3)")
    h = GGUFHeader(path=path, version=version, file_size=size)
    n_tensors = r.unpack("<Q", 8)
    n_kv = r.unpack("<Q", 8)
    # the smallest key-value pair is 14 bytes (length, 1-byte key, type, 1-byte value), the
    # smallest tensor entry 33 (length, 1-byte name, dimension count, one dimension, type, offset)
    if n_kv > MAX_KEYS or n_tensors > MAX_TENSORS:
        raise _Damaged(f"it declares {n_kv} keys and {n_tensors} tensors (specbench reads at most {MAX_KEYS} "
                       f"keys and {MAX_TENSORS} tensors)")
    if n_kv * 14 + n_tensors * 33 > r.left():
        raise _Damaged(f"it declares {n_kv} keys and {n_tensors} tensors, more than a file of {size} bytes can "
                       f"hold (a truncated or damaged file)")
    if n_tensors == 0:
        raise _Damaged("it holds no tensors (not a model)")
    h.metadata["general.version"] = version
    for i in range(n_kv):
        key = r.text(f"key {i}", MAX_KEY_BYTES)
        if not key:
            raise _Damaged(f"key {i} is empty")
        if not key.isprintable():  # a newline in a name would break the one-line message
            raise _Damaged(f"key {i} holds a control character ({key[:40]!r})")
        if key in h.types:
            raise _Damaged(f"the key {key} appears twice")
        vtype = r.unpack("<I", 4)
        h.types[key] = vtype
        value = _value(r, key, vtype, h)
        if value is not None:
            h.metadata[key] = value
    if "general.alignment" in h.types:
        align = h.metadata.get("general.alignment")
        if h.types["general.alignment"] != _UINT32 or not align or align & (align - 1):
            raise _Damaged(f"general.alignment is {align!r}; it must be a power of two (uint32)")
        h.alignment = align
    for i in range(n_tensors):
        name = r.text(f"the name of tensor {i}", MAX_NAME - 1)
        if not name:
            raise _Damaged(f"tensor {i} has an empty name")
        if not name.isprintable():
            raise _Damaged(f"the name of tensor {i} holds a control character ({name!r})")
        if name in h.tensors:
            raise _Damaged(f"the tensor {name} appears twice")
        n_dims = r.unpack("<I", 4)
        if not 1 <= n_dims <= 4:
            raise _Damaged(f"tensor {name} has {n_dims} dimensions (1 to 4)")
        shape = tuple(r.unpack("<Q", 8) for _ in range(n_dims))
        gtype = r.unpack("<I", 4)
        offset = r.unpack("<Q", 8)
        if 0 in shape:
            raise _Damaged(f"tensor {name} has a dimension of 0 (shape {list(shape)})")
        if gtype not in GGML_TYPES:
            raise _Damaged(f"tensor {name} has unknown ggml type {gtype}")
        tname, block, block_bytes = GGML_TYPES[gtype]
        if shape[0] % block:
            raise _Damaged(f"tensor {name} ({tname}) has rows of {shape[0]} values, not a multiple of its "
                           f"block of {block}")
        elements = 1
        for d in shape:
            elements *= d  # Python integers: a product of 2^64-sized dimensions is still exact
        nbytes = elements // block * block_bytes
        h.tensors[name] = GGUFTensor(name, shape, gtype, offset, nbytes)
    h.data_start = -(-r.pos // h.alignment) * h.alignment
    data_size = size - h.data_start
    if data_size < 0:
        raise _Cut
    end = 0
    for t in sorted(h.tensors.values(), key=lambda t: t.offset):
        if t.offset % h.alignment:
            raise _Damaged(f"tensor {t.name}'s data offset {t.offset} is not a multiple of the alignment {h.alignment}")
        if t.offset + t.nbytes > data_size:
            raise _Damaged(f"tensor {t.name} (shape {list(t.shape)}, {GGML_TYPES[t.ggml_type][0]}) needs "
                           f"{t.nbytes} bytes at offset {t.offset}, past the end of the file's {data_size} "
                           f"bytes of tensor data (a truncated or damaged file)")
        if t.offset < end:
            raise _Damaged(f"tensor {t.name}'s data overlaps the tensor before it")
        end = t.offset + t.nbytes
    return h


def _int(h: GGUFHeader, key: str) -> Optional[int]:
    """The integer scalar at `key`; None when absent; _Damaged when it is not an integer."""
    if key not in h.types:
        return None
    value = h.metadata.get(key)
    if h.types[key] not in _INTS or isinstance(value, bool):
        raise _Damaged(f"{key} must be an integer")
    return int(value)


def _per_layer(h: GGUFHeader, key: str, layer: int) -> Optional[int]:
    """An integer that may be given per layer (an array of one value per block)."""
    if h.types.get(key) == _ARRAY:
        values = h.metadata.get(key)
        if not isinstance(values, tuple) or not 0 <= layer < len(values) or h.arrays[key][0] not in _INTS:
            raise _Damaged(f"{key} must hold one integer per block")
        return int(values[layer])
    return _int(h, key)


def _first(h: GGUFHeader, part: str, dims: int) -> Optional[tuple[int, GGUFTensor]]:
    """The lowest block's tensor `blk.N.<part>` of `dims` dimensions, with N."""
    found = [(int(m.group(1)), t) for t in h.tensors.values()
             if (m := _BLOCK.match(t.name)) and t.name == f"blk.{m.group(1)}.{part}" and len(t.shape) == dims]
    return min(found, key=lambda nt: nt[0]) if found else None


def _blocks(present: set[int]) -> str:
    """'tensors for 30 (blk.0 to blk.29)', with the first missing number when there is a gap.
    Never a range over the numbers: a tensor may be named blk.99999999999999999999."""
    if not present:
        return "no blk.N tensors"
    ordered = sorted(present)
    text = f"tensors for {len(ordered)} (blk.{ordered[0]} to blk.{ordered[-1]}"
    gap = next((ordered[0] + i for i, n in enumerate(ordered) if n != ordered[0] + i), None)
    return text + (f", blk.{gap} missing)" if gap is not None else ")")


def _check_model(h: GGUFHeader, tokens: Optional[list[str]]) -> None:
    """The model-level checks (module doc); `h` is structurally sound, `tokens` its vocabulary."""
    arch = h.architecture
    if arch is None:
        raise _Damaged("general.architecture is missing (or not a string)")
    if arch not in ARCHITECTURES:
        raise UsageError(f"{h.path}: architecture {arch[:64]!r} is not one specbench loads "
                         f"(it converts GGUF files with transformers; known: {', '.join(ARCHITECTURES)})")
    # blocks: llama.cpp asserts 1 <= block_count <= 512; the converter builds as many as it says
    bc = _int(h, f"{arch}.block_count")
    if bc is None:
        raise _Damaged(f"{arch}.block_count is missing")
    present = {int(m.group(1)) for name in h.tensors if (m := _BLOCK.match(name))}
    if bc < 1:
        raise _Damaged(f"{arch}.block_count is {bc}; a model has at least one block (the file holds {_blocks(present)})")
    if len(present) != bc or min(present) != 0 or max(present) != bc - 1:  # distinct: so exactly 0..bc-1
        raise _Damaged(f"{arch}.block_count says {bc} blocks, but the file holds {_blocks(present)}")
    if bc > MAX_LAYERS:
        raise _Damaged(f"{arch}.block_count is {bc}, more than the {MAX_LAYERS} blocks llama.cpp supports")
    nextn = _int(h, f"{arch}.nextn_predict_layers")
    if nextn is not None and not 0 <= nextn <= bc:
        raise _Damaged(f"{arch}.nextn_predict_layers is {nextn}, outside 0..{bc} (the block count)")

    # vocabulary: token_embd is [embedding length, vocabulary]
    if h.types.get("tokenizer.ggml.model") != _STRING:
        raise _Damaged("tokenizer.ggml.model is missing (or not a string)")
    if h.arrays.get("tokenizer.ggml.tokens", (None,))[0] != _STRING or not tokens:
        raise _Damaged("tokenizer.ggml.tokens is missing (or not a list of strings)")
    n_vocab = len(tokens)
    embd = h.tensors.get("token_embd.weight")
    if embd is None or len(embd.shape) != 2:
        raise _Damaged("token_embd.weight is missing (or not a matrix)")
    if embd.shape[1] != n_vocab:
        raise _Damaged(f"tokenizer.ggml.tokens holds {n_vocab} tokens, but token_embd.weight has {embd.shape[1]} rows")
    declared = _int(h, f"{arch}.vocab_size")
    if declared is not None and declared != n_vocab:
        raise _Damaged(f"{arch}.vocab_size is {declared}, but tokenizer.ggml.tokens holds {n_vocab} tokens")
    for key, kinds in (("tokenizer.ggml.scores", (_FLOAT32, _INT32)), ("tokenizer.ggml.token_type", (_INT32,))):
        if key in h.types and (h.types[key] != _ARRAY or h.arrays[key][0] not in kinds or h.arrays[key][1] != n_vocab):
            raise _Damaged(f"{key} must hold one {'number' if len(kinds) > 1 else 'int32'} per token ({n_vocab})")
    seen: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        tok = tok or f"[EMPTY_{i}]"  # what llama.cpp names an empty token
        if tok in seen:
            raise _Damaged(f"tokenizer.ggml.tokens holds {tok[:40]!r} twice (tokens {seen[tok]} and {i}); "
                           f"llama.cpp aborts on a repeated token")
        seen[tok] = i

    # sizes that shape the model, against the tensors that carry them
    n_embd = _int(h, f"{arch}.embedding_length")
    if n_embd is None:
        raise _Damaged(f"{arch}.embedding_length is missing")
    if n_embd != embd.shape[0]:
        raise _Damaged(f"{arch}.embedding_length is {n_embd}, but token_embd.weight has rows of {embd.shape[0]}")
    if (ffn := _first(h, "ffn_up.weight", 2)) is not None:
        layer, t = ffn
        n_ff = _per_layer(h, f"{arch}.feed_forward_length", layer)
        if n_ff is not None and t.shape[1] not in (n_ff, 2 * n_ff):  # 2x: gate and up in one (phi3)
            raise _Damaged(f"{arch}.feed_forward_length is {n_ff}, but {t.name} has {t.shape[1]} rows")
    _check_attention(h, arch, n_embd)
    _check_experts(h, arch, bc)
    scaling = h.metadata.get(f"{arch}.rope.scaling.type")
    if f"{arch}.rope.scaling.type" in h.types and scaling not in ROPE_SCALING:
        raise _Damaged(f"{arch}.rope.scaling.type is {str(scaling)[:40]!r} (one of {', '.join(ROPE_SCALING)})")


def _check_attention(h: GGUFHeader, arch: str, n_embd: int) -> None:
    """Heads x head size against the first block's query (and key) projections; the value head
    size equal to the key's and the rotary dimensions equal to it where llama.cpp's graph asserts so."""
    a = f"{arch}.attention"
    key_len, value_len = _int(h, f"{a}.key_length"), _int(h, f"{a}.value_length")
    key_swa, value_swa = _int(h, f"{a}.key_length_swa"), _int(h, f"{a}.value_length_swa")
    for k, v, which in ((key_len, value_len, ""), (key_swa, value_swa, "_swa")):
        if k is not None and v is not None and k != v:
            raise _Damaged(f"{a}.key_length{which} is {k} but {a}.value_length{which} is {v}; llama.cpp "
                           f"asserts they are equal")
    q = _first(h, "attn_q.weight", 2)
    qkv = _first(h, "attn_qkv.weight", 2)
    if q is None and qkv is None:
        return  # no attention (mamba) or a layout specbench does not inspect
    layer, t = q if q is not None else qkv  # type: ignore[misc]
    heads = _per_layer(h, f"{a}.head_count", layer)
    if heads is None or heads < 1:
        raise _Damaged(f"{a}.head_count is {heads}; {t.name} needs at least one head")
    kv_heads = _per_layer(h, f"{a}.head_count_kv", layer)
    kv_heads = heads if kv_heads is None else kv_heads
    if not 1 <= kv_heads <= heads or heads % kv_heads:
        raise _Damaged(f"{a}.head_count_kv is {kv_heads}; it must divide {a}.head_count ({heads})")
    sizes = {s for s in (key_len, key_swa) if s is not None} or ({n_embd // heads} if n_embd % heads == 0 else set())
    if not sizes:
        raise _Damaged(f"{a}.head_count {heads} does not divide {arch}.embedding_length {n_embd} "
                       f"(and no {a}.key_length says the head size)")
    want = {heads * s for s in sizes} if q is not None else {(heads + 2 * kv_heads) * s for s in sizes}
    if t.shape[1] not in want:
        raise _Damaged(f"{t.name} has {t.shape[1]} rows, but {a}.head_count {heads} (kv {kv_heads}) with head "
                       f"size {' or '.join(map(str, sorted(sizes)))} needs {' or '.join(map(str, sorted(want)))}")
    k = h.tensors.get(f"blk.{layer}.attn_k.weight")
    if q is not None and k is not None and len(k.shape) == 2 and k.shape[1] not in {kv_heads * s for s in sizes}:
        raise _Damaged(f"{k.name} has {k.shape[1]} rows, but {a}.head_count_kv {kv_heads} with head size "
                       f"{' or '.join(map(str, sorted(sizes)))} needs {' or '.join(str(kv_heads * s) for s in sorted(sizes))}")
    rot = _int(h, f"{arch}.rope.dimension_count")
    if arch in _ROPE_IS_HEAD and rot is not None and rot not in sizes:
        raise _Damaged(f"{arch}.rope.dimension_count is {rot}, but the head size is "
                       f"{' or '.join(map(str, sorted(sizes)))}; llama.cpp asserts they are equal")


def _check_experts(h: GGUFHeader, arch: str, blocks: int) -> None:
    """llama.cpp's asserts on mixture-of-experts counts, and the expert tensors' third dimension."""
    n = _int(h, f"{arch}.expert_count") or 0
    used_key = f"{arch}.expert_used_count"
    used = max((_per_layer(h, used_key, i) or 0 for i in range(blocks)), default=0) if used_key in h.types else 0
    groups = _int(h, f"{arch}.expert_group_count") or 0
    group_used = _int(h, f"{arch}.expert_group_used_count") or 0
    if not 0 <= n <= MAX_EXPERTS:
        raise _Damaged(f"{arch}.expert_count is {n} (at most {MAX_EXPERTS})")
    if n == 0 and (used or groups):
        raise _Damaged(f"{used_key} or {arch}.expert_group_count is set for a model without experts")
    if n and not 0 < used <= n:
        raise _Damaged(f"{used_key} is {used}; with {n} experts it must be 1 to {n}")
    if n and groups and (groups >= n or (groups > 1 and (n % groups or not 0 < group_used < groups))):
        raise _Damaged(f"{arch}.expert_group_count {groups} (using {group_used}) does not split {n} experts")
    for part in ("ffn_up_exps.weight", "ffn_down_exps.weight", "ffn_gate_exps.weight"):
        if (found := _first(h, part, 3)) is not None and found[1].shape[2] != n:
            raise _Damaged(f"{found[1].name} holds {found[1].shape[2]} experts, but {arch}.expert_count is {n}")


def _read(path: Path, model: bool) -> GGUFHeader:
    try:
        # non-blocking and checked again once open: a FIFO swapped in after the caller's stat
        # neither blocks the open nor gets read
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise UsageError(f"GGUF file {path} is not a regular file")
            if st.st_size == 0:
                raise UsageError(f"{path} is not a GGUF file (it is empty)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                h = _parse(path, buf, len(buf))
            tokens = h.metadata.pop("tokenizer.ggml.tokens", None)  # kept only to be checked
            if model:
                _check_model(h, tokens)
            return h
    except _Cut:
        raise UsageError(f"{path}: the GGUF header is cut short (a truncated or damaged file)") from None
    except _Damaged as e:
        raise UsageError(f"{path}: damaged GGUF header: {e}") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


@lru_cache(maxsize=32)
def _cached(path: str, identity: tuple, model: bool) -> tuple[Optional[GGUFHeader], Optional[str]]:
    try:
        return _read(Path(path), model), None
    except UsageError as e:
        return None, str(e)


def read_gguf(path: str | os.PathLike, *, model: bool = True) -> GGUFHeader:
    """The header of GGUF file `path`, checked (module doc; `model=False`: the structure alone);
    UsageError naming the file and what is wrong. Remembered per file identity (device, inode,
    size, modification time), so the many callers of one run read it once."""
    p = Path(path).expanduser()
    if kind := special_kind(p):
        raise UsageError(f"GGUF file {p} is {kind}, not a regular file")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise UsageError(f"GGUF file not found: {p}") from None
    except OSError as e:
        raise UsageError(f"cannot read {p}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"GGUF file {p} is a folder, not a file")
    header, error = _cached(str(p), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), model)
    if error is not None:
        raise UsageError(error)
    assert header is not None
    return header


def check_gguf(path: str | os.PathLike) -> GGUFHeader:
    """`read_gguf` with every check: what runs before llama.cpp or the converter opens `path`."""
    return read_gguf(path, model=True)
