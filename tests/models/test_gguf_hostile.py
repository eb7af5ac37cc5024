"""Hostile GGUF files: each is refused with one line naming the file and what is wrong (exit 2)
before llama.cpp or the GGUF converter sees it (specbench_cli/gguf_header.py).

Unchecked, the embedded GGUF with `llama.block_count` patched to 0, 513 or 100000 made llama.cpp
abort the process (SIGABRT from a GGML_ASSERT, exit 134) and the transformers target hang in
"converting"; a GGUF cut to 1000 bytes, or one claiming 2^60 keys or a dimension of 0, ended in
a Python exception (exit 1); a FIFO named `.gguf` was called "not found".

Files are crafted two ways: from the embedded model (its 1.8 MB header patched, the tensor data
left as a hole of the original size) and from a small llama model written here byte by byte
(`Spec`), which gguf-py reads as a valid GGUF and the checks accept, then spoilt one field at a
time. The CLI cases run the real `specbench run` in-process with the converter and the model
loaders replaced by a failure (a case decided later than the header check cannot pass, and a
regression fails instead of hanging); the llama.cpp cases run in a subprocess, so an abort is a
failed test, not a dead test run.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers.cli import cli, one_error_line
from helpers.embedded import needs_model
from helpers.llama_build import require_llama_cpp_build

from specbench_cli.errors import UsageError
from specbench_cli.gguf_header import ARCHITECTURES, GGML_TYPES, check_gguf, read_gguf

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
        I64: "<q", F64: "<d"}
Q4_0, Q8_0 = 2, 8
REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- a GGUF writer
def gstr(text: str | bytes, length: Optional[int] = None) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def value(vtype: int, v: Any) -> bytes:
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        itype, items = v
        return struct.pack("<IQ", itype, len(items)) + b"".join(value(itype, x) for x in items)
    return struct.pack(_FMT[vtype], v)


@dataclass
class Tensor:
    name: str | bytes
    shape: tuple[int, ...]
    ggml_type: int = 0
    offset: Optional[int] = None   # None: laid out after the previous tensor, aligned
    n_dims: Optional[int] = None   # None: len(shape)


@dataclass
class Spec:
    """A GGUF file to write: `kvs` maps key -> (type, value); `raw_kvs` are extra key-value pairs
    as bytes (hostile encodings); counts and alignment can be overridden."""

    kvs: dict[str, tuple[int, Any]]
    tensors: list[Tensor]
    raw_kvs: list[bytes] = field(default_factory=list)
    version: int = 3
    n_kv: Optional[int] = None
    n_tensors: Optional[int] = None
    alignment: int = 32

    def to_bytes(self) -> bytes:
        kvs = [gstr(k) + struct.pack("<I", t) + value(t, v) for k, (t, v) in self.kvs.items()] + self.raw_kvs
        out = [b"GGUF", struct.pack("<IQQ", self.version, len(self.tensors) if self.n_tensors is None else self.n_tensors,
                                    len(kvs) if self.n_kv is None else self.n_kv), *kvs]
        at, infos = 0, []
        for t in self.tensors:
            _, block, size = GGML_TYPES.get(t.ggml_type, ("?", 1, 4))
            n = 1
            for d in t.shape:
                n *= d
            offset = at if t.offset is None else t.offset
            infos.append(gstr(t.name) + struct.pack("<I", len(t.shape) if t.n_dims is None else t.n_dims)
                         + b"".join(struct.pack("<Q", d) for d in t.shape) + struct.pack("<IQ", t.ggml_type, offset))
            at = -(-(offset + max(n, 0) // block * size) // self.alignment) * self.alignment
        head = b"".join(out + infos)
        self.header_length = len(head)
        head += b"\0" * (-len(head) % self.alignment)
        return head + b"\0" * (at if at < 1 << 24 else 0)  # a hostile size writes no data

    def write(self, path: Path) -> Path:
        path.write_bytes(self.to_bytes())
        return path


N_EMBD, N_FF, HEADS, KV_HEADS, HEAD, VOCAB = 32, 64, 4, 2, 8, 8


def block(i: int) -> list[Tensor]:
    p = f"blk.{i}."
    return [Tensor(p + "attn_norm.weight", (N_EMBD,)), Tensor(p + "attn_q.weight", (N_EMBD, HEADS * HEAD)),
            Tensor(p + "attn_k.weight", (N_EMBD, KV_HEADS * HEAD)), Tensor(p + "attn_v.weight", (N_EMBD, KV_HEADS * HEAD)),
            Tensor(p + "attn_output.weight", (HEADS * HEAD, N_EMBD)), Tensor(p + "ffn_norm.weight", (N_EMBD,)),
            Tensor(p + "ffn_gate.weight", (N_EMBD, N_FF)), Tensor(p + "ffn_up.weight", (N_EMBD, N_FF)),
            Tensor(p + "ffn_down.weight", (N_FF, N_EMBD))]


def small(blocks: int = 2) -> Spec:
    """A small, valid llama model (float32, zero weights): the checks accept it, gguf-py reads it."""
    tokens = ["<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc"]
    kvs = {"general.architecture": (STR, "llama"), "general.name": (STR, "small"),
           "llama.block_count": (U32, blocks), "llama.context_length": (U32, 64),
           "llama.embedding_length": (U32, N_EMBD), "llama.feed_forward_length": (U32, N_FF),
           "llama.attention.head_count": (U32, HEADS), "llama.attention.head_count_kv": (U32, KV_HEADS),
           "llama.rope.dimension_count": (U32, HEAD), "llama.vocab_size": (U32, VOCAB),
           "llama.attention.layer_norm_rms_epsilon": (F32, 1e-5),
           "tokenizer.ggml.model": (STR, "gpt2"), "tokenizer.ggml.tokens": (ARR, (STR, tokens)),
           "tokenizer.ggml.scores": (ARR, (F32, [0.0] * VOCAB)), "tokenizer.ggml.token_type": (ARR, (I32, [1] * VOCAB)),
           "tokenizer.ggml.merges": (ARR, (STR, ["a b", "b c"])), "tokenizer.ggml.eos_token_id": (U32, 2)}
    tensors = [Tensor("token_embd.weight", (N_EMBD, VOCAB)), Tensor("output_norm.weight", (N_EMBD,))]
    for i in range(blocks):
        tensors += block(i)
    return Spec(kvs, tensors)


def cut_in_last_offset() -> bytes:
    """small() cut 4 bytes into the last tensor's 8-byte data offset."""
    s = small()
    return s.to_bytes()[:s.header_length - 4]


def spoilt(**changes: Any) -> Spec:
    """small() with keys set ((type, value)) or removed (None), by `key__name` = `key.name`."""
    s = small()
    for key, v in changes.items():
        key = key.replace("__", ".")
        if v is None:
            s.kvs.pop(key)
        else:
            s.kvs[key] = v
    return s


def with_tensor(which: str, **changes: Any) -> Spec:
    """small() with the tensor named `which` changed (its name, shape, type, offset or dimension count)."""
    s = small()
    t = next(t for t in s.tensors if t.name == which)
    for k, v in changes.items():
        setattr(t, k, v)
    return s


def refusal(path: Path, model: bool = True) -> str:
    """The one-line refusal of `path` (fails the test when it is accepted)."""
    with pytest.raises(UsageError) as e:
        read_gguf(path, model=model)
    text = str(e.value)
    assert "\n" not in text and str(path) in text, text
    return text


# ----------------------------------------------------------------------------- the embedded GGUF, patched
def embedded() -> Path:
    from specbench_cli.models.load import locate_alias

    return locate_alias("smollm2-135m")


def patched_embedded(tmp_path: Path, name: str, key: str, new: int, *, cut: Optional[int] = None) -> Path:
    """The embedded GGUF's header with the uint32 at `key` set to `new`, its tensor data a hole of
    the original length (never read by the checks; llama.cpp aborts before it reads any)."""
    src = embedded()
    size = src.stat().st_size
    with open(src, "rb") as f:
        head = bytearray(f.read(4 << 20))
    needle = gstr(key)
    at = head.find(needle)
    assert at > 0 and struct.unpack_from("<I", head, at + len(needle))[0] == U32, key
    struct.pack_into("<I", head, at + len(needle) + 4, new)
    out = tmp_path / name
    with open(out, "wb") as f:
        f.write(head[:cut] if cut is not None else head)
        if cut is None:
            f.truncate(size)
    return out


# ----------------------------------------------------------------------------- no false refusals
def test_the_small_model_is_valid_and_what_gguf_py_reads(tmp_path):
    """The writer above is a GGUF writer: gguf-py reads its file back, and the checks accept it."""
    gguf = pytest.importorskip("gguf")
    path = small().write(tmp_path / "small.gguf")
    h = check_gguf(path)
    r = gguf.GGUFReader(str(path))
    assert [t.name for t in r.tensors] == list(h.tensors) and len(h.tensors) == 2 + 2 * 9
    assert r.fields["llama.block_count"].contents() == h.metadata["llama.block_count"] == 2
    assert [t.data_offset for t in r.tensors] == [h.data_start + t.offset for t in h.tensors.values()]


@needs_model
def test_the_embedded_model_passes_with_bounded_memory():
    """The untouched embedded GGUF (98 MB) is accepted; reading its 1.8 MB header keeps less than
    40 MB of Python objects at its peak (the tokens, to find repeats), nothing of the tensor data."""
    from specbench_cli import gguf_header

    path = embedded()

    gguf_header._cached.cache_clear()
    tracemalloc.start()
    try:
        h = check_gguf(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert h.architecture == "llama" and h.metadata["llama.block_count"] == 30 and len(h.tensors) == 272
    assert h.arrays["tokenizer.ggml.tokens"] == (STR, 49152)
    assert peak < 40 << 20, peak


def test_the_tiny_test_gguf_and_its_float32_copy_pass(tmp_path):
    """The tests' tiny GGUF (written by gguf-py) and the copy `float32_copy` makes of it (how the
    llama.cpp target's exactness tests make theirs) are accepted."""
    pytest.importorskip("gguf")
    from helpers.tiny_gguf import write_tiny_gguf

    from specbench_cli.models.gguf_f32 import float32_copy

    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    float32_copy(tiny, tmp_path / "tiny-f32.gguf")
    for path in (tiny, tmp_path / "tiny-f32.gguf"):
        h = check_gguf(path)
        assert h.metadata["llama.block_count"] == 1 and len(h.tensors) == 3 + 9, path


def test_the_tables_agree_with_gguf_py_and_transformers():
    """Every ggml type gguf-py de-quantises has the block and byte sizes gguf_header.py uses, and
    every architecture it accepts is one transformers' GGUF converter reads."""
    quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGML_QUANT_SIZES

    for t in quants._type_traits:
        assert GGML_TYPES[int(t)][1:] == GGML_QUANT_SIZES[t], t
    ggml = pytest.importorskip("transformers.integrations.ggml")
    renamed = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
    for arch in ARCHITECTURES:
        assert renamed.get(arch, arch) in ggml.GGUF_CONFIG_MAPPING, arch


# ----------------------------------------------------------------------------- structure
STRUCTURE = [
    ("not-gguf", lambda: b"GGML" + b"\0" * 100, "is not a GGUF file"),
    ("empty", lambda: b"", "is not a GGUF file (it is empty)"),
    ("version-1", lambda: Spec(**{**vars(small()), "version": 1}).to_bytes(), "GGUF version 1 is not supported"),
    ("version-4", lambda: Spec(**{**vars(small()), "version": 4}).to_bytes(), "GGUF version 4 is not supported"),
    ("cut-13", lambda: b"GGUF\x03\x00\x00\x00" + b"\0" * 5, "the GGUF header is cut short"),
    ("cut-mid-header", lambda: small().to_bytes()[:600], "more than a file of 600 bytes can hold"),
    ("cut-in-last-offset", lambda: cut_in_last_offset(), "the GGUF header is cut short (a truncated or damaged file)"),
    ("keys-2^60", lambda: Spec(**{**vars(small()), "n_kv": 1 << 60}).to_bytes(), "declares 1152921504606846976 keys"),
    ("tensors-2^60", lambda: Spec(**{**vars(small()), "n_tensors": 1 << 60}).to_bytes(), "1152921504606846976 tensors"),
    ("no-tensors", lambda: Spec(small().kvs, []).to_bytes(), "it holds no tensors"),
    ("key-2^62-long", lambda: Spec(small().kvs, small().tensors, [gstr(b"x", 1 << 62)]).to_bytes(),
     "key 17 is 4611686018427387904 bytes long"),
    ("string-value-2^62-long", lambda: Spec(small().kvs, small().tensors, [gstr("general.x") + struct.pack("<I", STR)
                                            + gstr(b"", 1 << 62)]).to_bytes(), "the value of general.x is 4611686018427387904 bytes"),
    ("strings-2^40", lambda: Spec(small().kvs, small().tensors, [gstr("general.y") + struct.pack("<IIQ", ARR, STR, 1 << 40)]
                                  ).to_bytes(), "general.y claims 1099511627776 strings"),
    ("numbers-2^40", lambda: Spec(small().kvs, small().tensors, [gstr("general.y") + struct.pack("<IIQ", ARR, U32, 1 << 40)]
                                  ).to_bytes(), "general.y claims 1099511627776 entries of 4 bytes"),
    ("nested-array", lambda: Spec(small().kvs, small().tensors, [gstr("general.y") + struct.pack("<IIQ", ARR, ARR, 1)
                                                                 + struct.pack("<IQ", U8, 0)]).to_bytes(), "an array of arrays"),
    ("value-type-13", lambda: Spec(small().kvs, small().tensors, [gstr("general.y") + struct.pack("<I", 13)]).to_bytes(),
     "key general.y has unknown value type 13"),
    ("duplicate-key", lambda: Spec(small().kvs, small().tensors, [gstr("general.name") + struct.pack("<I", STR)
                                                                  + gstr("again")]).to_bytes(), "the key general.name appears twice"),
    ("empty-key", lambda: Spec(small().kvs, small().tensors, [gstr("") + struct.pack("<I", U8) + b"\0"]).to_bytes(),
     "key 17 is empty"),
    ("key-newline", lambda: Spec(small().kvs, small().tensors, [gstr("a\nb") + struct.pack("<I", U8) + b"\0"]).to_bytes(),
     "key 17 holds a control character ('a\\nb')"),
    ("key-not-utf8", lambda: Spec(small().kvs, small().tensors, [gstr(b"\xff\xfe") + struct.pack("<I", U8) + b"\0"]).to_bytes(),
     "key 17 is not UTF-8 text"),
    ("token-not-utf8", lambda: spoilt(tokenizer__ggml__tokens=(ARR, (STR, [b"\xc3"] + ["x"] * 7))).to_bytes(),
     "tokenizer.ggml.tokens[0] is not UTF-8 text"),
    ("alignment-3", lambda: spoilt(general__alignment=(U32, 3)).to_bytes(), "general.alignment is 3; it must be a power of two"),
    ("alignment-0", lambda: spoilt(general__alignment=(U32, 0)).to_bytes(), "general.alignment is 0"),
    ("alignment-u64", lambda: spoilt(general__alignment=(U64, 32)).to_bytes(), "general.alignment is 32; it must be a power of two (uint32)"),
    ("name-64-bytes", lambda: with_tensor("output_norm.weight", name="n" * 64).to_bytes(), "is 64 bytes long (at most 63)"),
    ("name-newline", lambda: with_tensor("output_norm.weight", name="x\ny").to_bytes(), "the name of tensor 1 holds a control"),
    ("duplicate-tensor", lambda: with_tensor("output_norm.weight", name="token_embd.weight").to_bytes(),
     "the tensor token_embd.weight appears twice"),
    ("dims-0", lambda: with_tensor("output_norm.weight", shape=(), n_dims=0).to_bytes(), "output_norm.weight has 0 dimensions"),
    ("dims-5", lambda: with_tensor("output_norm.weight", shape=(32, 1, 1, 1, 1)).to_bytes(), "has 5 dimensions"),
    ("dimension-0", lambda: with_tensor("blk.0.attn_q.weight", shape=(32, 0)).to_bytes(),
     "blk.0.attn_q.weight has a dimension of 0 (shape [32, 0])"),
    ("ggml-type-4", lambda: with_tensor("output_norm.weight", ggml_type=4).to_bytes(), "output_norm.weight has unknown ggml type 4"),
    ("ggml-type-huge", lambda: with_tensor("output_norm.weight", ggml_type=1 << 31).to_bytes(), "unknown ggml type 2147483648"),
    ("row-not-block", lambda: with_tensor("blk.0.ffn_down.weight", ggml_type=Q4_0, shape=(48, 32)).to_bytes(),
     "has rows of 48 values, not a multiple of its block of 32"),
    ("offset-unaligned", lambda: with_tensor("output_norm.weight", offset=4).to_bytes(), "data offset 4 is not a multiple"),
    ("offset-past-end", lambda: with_tensor("output_norm.weight", offset=1 << 40).to_bytes(), "past the end of the file"),
    ("shape-2^40", lambda: with_tensor("blk.1.ffn_down.weight", shape=(1 << 40, 1 << 40)).to_bytes(), "past the end of the file"),
    ("overlap", lambda: with_tensor("output_norm.weight", offset=0).to_bytes(), "overlaps the tensor before it"),
]


@pytest.mark.parametrize("name,make,words", STRUCTURE, ids=[c[0] for c in STRUCTURE])
def test_a_damaged_structure_is_one_line(name, make, words, tmp_path):
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(make())
    tracemalloc.start()
    try:
        text = refusal(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert words in text, text
    assert peak < 8 << 20, f"{peak} bytes for a refused header"  # claimed counts allocate nothing


# ----------------------------------------------------------------------------- the model the header describes
def many_blocks(n: int, declared: int) -> Spec:
    s = small(0)
    s.kvs["llama.block_count"] = (U32, declared)
    s.tensors += [Tensor(f"blk.{i}.attn_norm.weight", (N_EMBD,)) for i in range(n)]
    return s


def gapped() -> Spec:
    s = small(3)
    s.tensors = [t for t in s.tensors if not t.name.startswith("blk.1.")]
    return s


MODEL = [
    ("no-architecture", lambda: spoilt(general__architecture=None), "general.architecture is missing"),
    ("architecture-t5", lambda: spoilt(general__architecture=(STR, "t5")), "architecture 't5' is not one specbench loads"),
    ("block-count-missing", lambda: spoilt(llama__block_count=None), "llama.block_count is missing"),
    ("block-count-0", lambda: spoilt(llama__block_count=(U32, 0)), "llama.block_count is 0; a model has at least one block"),
    ("block-count-3-of-2", lambda: spoilt(llama__block_count=(U32, 3)),
     "llama.block_count says 3 blocks, but the file holds tensors for 2 (blk.0 to blk.1)"),
    ("block-count-100000", lambda: spoilt(llama__block_count=(U32, 100000)), "llama.block_count says 100000 blocks"),
    ("block-count-2^40", lambda: spoilt(llama__block_count=(U64, 1 << 40)), "llama.block_count says 1099511627776 blocks"),
    ("block-named-10^20", lambda: with_tensor("blk.1.ffn_down.weight", name="blk.100000000000000000000.x"),
     "says 2 blocks, but the file holds tensors for 3 (blk.0 to blk.100000000000000000000, blk.2 missing)"),
    ("block-count-negative", lambda: spoilt(llama__block_count=(I32, -1)), "llama.block_count is -1"),
    ("block-count-string", lambda: spoilt(llama__block_count=(STR, "2")), "llama.block_count must be an integer"),
    ("block-gap", gapped, "llama.block_count says 3 blocks, but the file holds tensors for 2 (blk.0 to blk.2, blk.1 missing)"),
    ("blocks-513", lambda: many_blocks(513, 513), "llama.block_count is 513, more than the 512 blocks llama.cpp supports"),
    ("nextn-3", lambda: spoilt(llama__nextn_predict_layers=(U32, 3)), "llama.nextn_predict_layers is 3"),
    ("no-tokenizer-model", lambda: spoilt(tokenizer__ggml__model=None), "tokenizer.ggml.model is missing"),
    ("no-tokens", lambda: spoilt(tokenizer__ggml__tokens=None), "tokenizer.ggml.tokens is missing"),
    ("tokens-not-strings", lambda: spoilt(tokenizer__ggml__tokens=(ARR, (U32, [1] * 8))), "tokenizer.ggml.tokens is missing (or not a list"),
    ("tokens-vs-rows", lambda: spoilt(tokenizer__ggml__tokens=(ARR, (STR, [str(i) for i in range(9)]))),
     "tokenizer.ggml.tokens holds 9 tokens, but token_embd.weight has 8 rows"),
    ("vocab-size", lambda: spoilt(llama__vocab_size=(U32, 1 << 30)), "llama.vocab_size is 1073741824, but tokenizer.ggml.tokens holds 8"),
    ("scores-short", lambda: spoilt(tokenizer__ggml__scores=(ARR, (F32, [0.0] * 7))), "tokenizer.ggml.scores must hold one number per token (8)"),
    ("token-type-f32", lambda: spoilt(tokenizer__ggml__token_type=(ARR, (F32, [1.0] * 8))), "tokenizer.ggml.token_type must hold one int32"),
    ("token-twice", lambda: spoilt(tokenizer__ggml__tokens=(ARR, (STR, ["a", "b", "c", "d", "e", "f", "g", "a"]))),
     "tokenizer.ggml.tokens holds 'a' twice (tokens 0 and 7)"),
    ("no-token-embd", lambda: with_tensor("token_embd.weight", name="tok_embd.weight"), "token_embd.weight is missing"),
    ("embedding-length", lambda: spoilt(llama__embedding_length=(U32, 1 << 20)),
     "llama.embedding_length is 1048576, but token_embd.weight has rows of 32"),
    ("ffn-length", lambda: spoilt(llama__feed_forward_length=(U32, 1 << 24)),
     "llama.feed_forward_length is 16777216, but blk.0.ffn_up.weight has 64 rows"),
    ("heads-0", lambda: spoilt(llama__attention__head_count=(U32, 0)), "llama.attention.head_count is 0"),
    ("kv-heads-3", lambda: spoilt(llama__attention__head_count_kv=(U32, 3)), "head_count_kv is 3; it must divide"),
    ("head-size-huge", lambda: spoilt(llama__attention__key_length=(U32, 1 << 20), llama__attention__value_length=(U32, 1 << 20)),
     "blk.0.attn_q.weight has 32 rows, but llama.attention.head_count 4 (kv 2) with head size 1048576"),
    ("heads-vs-k", lambda: spoilt(llama__attention__head_count_kv=(U32, 4)), "blk.0.attn_k.weight has 16 rows"),
    ("key-vs-value", lambda: spoilt(llama__attention__key_length=(U32, 8), llama__attention__value_length=(U32, 4)),
     "llama.attention.key_length is 8 but llama.attention.value_length is 4"),
    ("rope-dims", lambda: spoilt(llama__rope__dimension_count=(U32, 4)), "llama.rope.dimension_count is 4, but the head size is 8"),
    ("rope-scaling", lambda: spoilt(llama__rope__scaling__type=(STR, "bogus")), "llama.rope.scaling.type is 'bogus'"),
    ("experts-2000", lambda: spoilt(llama__expert_count=(U32, 2000), llama__expert_used_count=(U32, 2)),
     "llama.expert_count is 2000 (at most 1024)"),
    ("experts-used-9", lambda: spoilt(llama__expert_count=(U32, 8), llama__expert_used_count=(U32, 9)),
     "llama.expert_used_count is 9; with 8 experts"),
    ("experts-used-alone", lambda: spoilt(llama__expert_used_count=(U32, 2)), "set for a model without experts"),
]


@pytest.mark.parametrize("name,make,words", MODEL, ids=[c[0] for c in MODEL])
def test_a_header_llama_cpp_or_the_converter_cannot_use_is_one_line(name, make, words, tmp_path):
    text = refusal(make().write(tmp_path / f"{name}.gguf"))
    assert words in text, text


def test_structure_alone_accepts_what_the_model_checks_refuse(tmp_path):
    """`model=False` reads a sound structure that describes no usable model (the split is real)."""
    path = spoilt(llama__block_count=(U32, 0)).write(tmp_path / "zero.gguf")
    assert read_gguf(path, model=False).metadata["llama.block_count"] == 0
    refusal(path)


def test_a_rewritten_file_is_read_again(tmp_path):
    """The result is remembered per file identity: a file replaced in place is checked anew."""
    path = small().write(tmp_path / "m.gguf")
    check_gguf(path)
    spoilt(llama__block_count=(U32, 7)).write(tmp_path / "other.gguf")
    os.replace(tmp_path / "other.gguf", path)
    assert "says 7 blocks" in refusal(path)


# ----------------------------------------------------------------------------- through `specbench run`
@pytest.fixture
def no_loads(monkeypatch, tmp_path):
    """The converter and every model loader fail the test: each case must end before them."""
    import specbench_cli.models.load as load

    def refuse(*args, **kwargs):
        raise AssertionError("the converter or a model loader was reached")

    for name in ("_convert_gguf", "load_model"):
        monkeypatch.setattr(load, name, refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))


def run_args(model: Path, tmp_path: Path, *extra: str) -> list[str]:
    q = tmp_path / "q.jsonl"
    q.write_text('{"question_id": 1, "category": "qa", "turns": ["Say hi."]}\n')
    return ["run", "--model", str(model), "--tasks", "jsonl", "--questions", str(q), "--methods", "ar", "--limit", "1",
            "--max-new-tokens", "4", "--output-dir", str(tmp_path / "out"), "--threads", "1", "--no-report", *extra]




@needs_model
@pytest.mark.parametrize("blocks", [0, 513, 100000])
def test_crafted_block_count_on_the_hf_target(blocks, tmp_path, no_loads, capsys):
    """The embedded GGUF with its block count patched: one line, exit 2, nothing converted (it
    hung in "converting")."""
    crafted = patched_embedded(tmp_path, f"blocks-{blocks}.gguf", "llama.block_count", blocks)
    line = one_error_line(*cli(run_args(crafted, tmp_path), capsys))
    assert str(crafted) in line and "llama.block_count" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache" / "models").exists()


@needs_model
def test_a_gguf_cut_to_1000_bytes_on_the_hf_target(tmp_path, no_loads, capsys):
    """It was exit 1, "unpack_from requires a buffer"."""
    cut = patched_embedded(tmp_path, "cut.gguf", "llama.block_count", 30, cut=1000)
    line = one_error_line(*cli(run_args(cut, tmp_path), capsys))
    assert f"{cut}: damaged GGUF header: it declares 33 keys and 272 tensors, more than a file of 1000 bytes" in line


@pytest.mark.parametrize("name,make,words", [
    ("keys.gguf", lambda: Spec(**{**vars(small()), "n_kv": 1 << 60}).to_bytes(), "declares 1152921504606846976 keys"),
    ("tensors.gguf", lambda: Spec(**{**vars(small()), "n_tensors": 1 << 60}).to_bytes(), "1152921504606846976 tensors"),
    ("zero-dim.gguf", lambda: with_tensor("blk.0.attn_q.weight", shape=(32, 0)).to_bytes(), "has a dimension of 0"),
])
def test_huge_counts_and_zero_dimensions_through_the_cli(name, make, words, tmp_path, no_loads, capsys):
    """They were exit 1, UnicodeDecodeError."""
    path = tmp_path / name
    path.write_bytes(make())
    line = one_error_line(*cli(run_args(path, tmp_path), capsys))
    assert str(path) in line and words in line


def test_a_fifo_named_gguf_is_not_a_regular_file(tmp_path, no_loads, capsys):
    """It was called "not found"; nothing opens it (a reader would block)."""
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    line = one_error_line(*cli(run_args(fifo, tmp_path), capsys))
    assert line == f"error: GGUF file {fifo} is a FIFO (named pipe), not a regular file"


def test_a_folder_named_gguf_and_a_missing_gguf(tmp_path, no_loads, capsys):
    (tmp_path / "dir.gguf").mkdir()
    assert one_error_line(*cli(run_args(tmp_path / "dir.gguf", tmp_path), capsys)).endswith("dir.gguf is a folder, not a file")
    assert "GGUF file not found" in one_error_line(*cli(run_args(tmp_path / "none.gguf", tmp_path), capsys))


# ----------------------------------------------------------------------------- the real llama.cpp target
LOAD = textwrap.dedent("""
    import sys
    from specbench_cli.errors import UsageError
    from specbench_cli.targets.llama_cpp.target import LlamaCppTarget
    if sys.argv[2] == "unchecked":  # the control: the same file with the header check taken out
        import specbench_cli.gguf_header
        specbench_cli.gguf_header.check_gguf = lambda path: None
    try:
        LlamaCppTarget.load(sys.argv[1], threads=1)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print("loaded")
""")




def python(*args: str, cache: Optional[Path] = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    if cache is not None:
        env["SPECBENCH_CACHE"] = str(cache)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


@needs_model
def test_block_count_513_on_the_llama_cpp_target_is_exit_2_not_sigabrt(tmp_path):
    """The target's own check runs before libllama opens the file: exit 2, one line. The control
    (check taken out) shows the file is hostile: llama.cpp aborts the process (SIGABRT)."""
    require_llama_cpp_build()
    crafted = patched_embedded(tmp_path, "blocks-513.gguf", "llama.block_count", 513)
    res = python("-c", LOAD, str(crafted), "checked")
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert res.stderr.strip().splitlines() == [f"error: {crafted}: damaged GGUF header: llama.block_count says "
                                               f"513 blocks, but the file holds tensors for 30 (blk.0 to blk.29)"]
    control = python("-c", LOAD, str(crafted), "unchecked")
    assert control.returncode == -signal.SIGABRT, (control.returncode, control.stderr[-2000:])
    assert "GGML_ASSERT" in control.stderr and "n_layer" in control.stderr


@needs_model
def test_block_count_513_through_specbench_run_target_llama_cpp(tmp_path):
    """The whole command (a process of its own): exit 2 with one line, no signal, no run folder."""
    require_llama_cpp_build()
    crafted = patched_embedded(tmp_path, "blocks-513.gguf", "llama.block_count", 513)
    res = python("-m", "specbench_cli", *run_args(crafted, tmp_path, "--target", "llama.cpp"), cache=tmp_path / "cache")
    line = one_error_line(res.returncode, res.stdout, res.stderr)
    assert str(crafted) in line and "llama.block_count says 513 blocks" in line
    assert not (tmp_path / "out").exists()
