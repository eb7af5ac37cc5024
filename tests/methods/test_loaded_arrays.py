"""Arrays and headers specbench loads from files a user hands over are validated before numpy,
safetensors or torch allocate anything for them: a datastore's `tokens.npy` / `lengths.npy`
(samd, suffix), a heads folder's `config.json` and safetensors (`--heads`, `heads import`).
Each hostile file is planted and the command is shown to end in one `error:` line naming it,
exit 2, before any model loads."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import cli, one_error_line
from helpers.tiny import make_tokenizer

from specbench_cli.errors import UsageError
from specbench_cli.methods.retrieval import datastore as store
from specbench_cli.models.safetensors_check import read_header

DEEP = "[" * 200_000 + "]" * 200_000  # a recursive parser's RecursionError, or worse


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))


@pytest.fixture
def no_model_loads(monkeypatch):
    """Loading a model fails the test: every case here must be decided before that."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad-input case")

    import specbench_cli.models.load

    monkeypatch.setattr(specbench_cli.models.load, "load_model", refuse)




# -- datastores: tokens.npy and lengths.npy (samd's static automaton, suffix's global tree) ----------

def datastore(folder: Path, seqs=([28, 29],)) -> Path:
    """A datastore without draftretriever's index, for the tiny 128-token tokenizer."""
    store.write([list(s) for s in seqs], make_tokenizer(), folder, ["test"], index=False)
    return folder


def edit_record(folder: Path, **fields) -> dict:
    meta = json.loads((folder / store.META).read_text())
    meta.update(fields, tokens_bytes=(folder / store.TOKENS).stat().st_size)
    (folder / store.META).write_text(json.dumps(meta))
    return meta


def npy_with_header(path: Path, shape: tuple, dtype: str, data: bytes) -> None:
    """An .npy file whose header says `shape` and `dtype` whatever `data` holds."""
    head = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape!r}, }}".encode()
    head += b" " * (63 - (10 + len(head)) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + data)


def test_a_good_datastore_still_reads(tmp_path):
    folder = datastore(tmp_path / "ds", [[1, 2, 3], [4, 5], [6, 7, 8, 9]])
    meta = store.read_meta(folder, index=False)
    assert store.read_sequences(folder, meta, "samd") == [[1, 2, 3], [4, 5], [6, 7, 8, 9]]


def test_lengths_whose_int64_sum_wraps_are_refused(tmp_path):
    """[2^63-1, 2^63-1, 4] sums to 2 in int64: over 2 tokens it was read as [[28, 29], [], [28, 29]]
    (an empty sequence included)."""
    folder = datastore(tmp_path / "ds")
    np.save(folder / store.LENGTHS, np.array([2**63 - 1, 2**63 - 1, 4], dtype=np.int64))
    assert int(np.load(folder / store.LENGTHS).sum()) == 2  # the wrap this guards against
    meta = edit_record(folder, entries=3)
    with pytest.raises(UsageError, match=r"3 lengths adding up to 18446744073709551618 for 2 tokens"):
        store.read_sequences(folder, meta, "samd")


@pytest.mark.parametrize("method", ["samd", "suffix"])
def test_a_wrapping_datastore_is_one_line_before_the_model_loads(method, tmp_path, tiny_model_dir, no_model_loads,
                                                                  capsys):
    folder = datastore(tmp_path / "ds")
    np.save(folder / store.LENGTHS, np.array([2**63 - 1, 2**63 - 1, 4], dtype=np.int64))
    edit_record(folder, entries=3)
    line = one_error_line(*cli(["run", "--model", str(tiny_model_dir), "--methods", method,
                                "-o", f"{method}.datastore={folder}", "--output-dir", str(tmp_path / "runs")], capsys))
    assert f"{method} datastore {folder}" in line and "adding up to 18446744073709551618 for 2 tokens" in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_tokens_header_claiming_terabytes_is_refused_before_allocating(tmp_path, tiny_model_dir, no_model_loads,
                                                                         capsys):
    """A header claiming 2^40 int32 tokens over 8 bytes of data: np.load asked for 4 TiB (MemoryError)."""
    folder = datastore(tmp_path / "ds")
    npy_with_header(folder / store.TOKENS, (2**40,), "<i4", struct.pack("<2i", 28, 29))
    edit_record(folder, tokens=2**40)
    line = one_error_line(*cli(["run", "--model", str(tiny_model_dir), "--methods", "samd",
                                "-o", f"samd.datastore={folder}"], capsys))
    assert f"samd datastore {folder}" in line
    assert "tokens.npy's header claims 1099511627776 values of 4 bytes, the file holds 8 bytes" in line


class Planted:
    """Unpickling this writes a marker file: proof that a pickle ran."""

    marker: Path

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("damage,message", [
    (lambda f: npy_with_header(f, (2,), "<f8", b"\0" * 16), "lengths.npy holds float64 values, not integers"),
    (lambda f: np.save(f, np.array([[1], [1]])), "lengths.npy is a 2-D array of shape [2, 1], not 1-D"),
    (lambda f: np.save(f, np.array([3, -1])), "lengths.npy holds a sequence length below 1"),
    (lambda f: np.save(f, np.array([2, 0])), "lengths.npy holds a sequence length below 1"),
    (lambda f: npy_with_header(f, (3,), "<i8", b"\0" * 16), "header claims 3 values of 8 bytes, the file holds 16"),
    (lambda f: f.write_bytes(b"\x93NUMPY\x03\x00" + b"\0" * 40), "lengths.npy is not a readable .npy array"),
    (lambda f: f.write_bytes(b"not numpy at all"), "lengths.npy is not a readable .npy array"),
    (lambda f: np.save(f, np.array([1, 1], dtype=np.uint64)), "2 lengths adding up to 2 for 2 tokens, the record says 1"),
])
def test_damaged_lengths_are_refused_by_name(damage, message, tmp_path):
    folder = datastore(tmp_path / "ds")
    damage(folder / store.LENGTHS)
    meta = store.read_meta(folder, index=False)
    with pytest.raises(UsageError, match="samd datastore .*ds: ") as e:
        store.read_sequences(folder, meta, "samd")
    assert message in str(e.value)


def test_an_object_array_is_refused_without_unpickling(tmp_path):
    folder = datastore(tmp_path / "ds")
    Planted.marker = tmp_path / "pickle-ran"
    np.save(folder / store.LENGTHS, np.array([Planted(), 2], dtype=object), allow_pickle=True)
    meta = store.read_meta(folder, index=False)
    with pytest.raises(UsageError, match="lengths.npy holds object values, not integers"):
        store.read_sequences(folder, meta, "samd")
    assert not Planted.marker.exists()


# -- heads: config.json and safetensors headers --------------------------------------------------

def safetensors_bytes(header: dict, data: bytes = b"", length: int | None = None) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def published_eagle(folder: Path, config: str | None = None, weights: bytes | None = None) -> Path:
    """SafeAILab's EAGLE layout as `heads import` detects it (config.json + model.safetensors)."""
    from safetensors.torch import save_file

    from specbench_cli.methods.heads.model import EagleHead

    folder.mkdir()
    head = EagleHead(_eagle_cfg())
    cfg = head.config_dict()
    (folder / "config.json").write_text(json.dumps(cfg) if config is None else config)
    if weights is None:
        save_file({k: v.contiguous() for k, v in head.state_dict().items() if not k.startswith("rotary.")},
                  str(folder / "model.safetensors"))
    else:
        (folder / "model.safetensors").write_bytes(weights)
    return folder


def _eagle_cfg():
    from transformers import LlamaConfig

    from specbench_cli.methods.heads.model import eagle_config

    return eagle_config(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2), 1)


HUGE = safetensors_bytes({"fc.weight": {"dtype": "F32", "shape": [2**31, 2**31], "data_offsets": [0, 16]}}, b"\0" * 16)


@pytest.mark.parametrize("plant,message", [
    (dict(config=DEEP), "config.json: not valid JSON (nested deeper than 100 levels)"),
    (dict(weights=HUGE), "model.safetensors: not a valid safetensors file (tensor 'fc.weight': shape [2147483648, "
                         "2147483648] of F32 is 18446744073709551616 bytes, its data_offsets hold 16)"),
])
def test_heads_import_of_a_hostile_folder_is_one_line_naming_the_file(plant, message, tmp_path, capsys):
    src = published_eagle(tmp_path / "published", **plant)
    line = one_error_line(*cli(["heads", "import", str(src), "--out", str(tmp_path / "heads")], capsys))
    assert str(src) in line and message in line
    assert not (tmp_path / "heads").exists()


@pytest.mark.parametrize("plant,message", [
    (dict(config=DEEP), "config.json: not valid JSON (nested deeper than 100 levels)"),
    (dict(weights=HUGE), "shape [2147483648, 2147483648] of F32 is 18446744073709551616 bytes"),
])
def test_a_hostile_heads_folder_is_one_line_before_the_model_loads(plant, message, tmp_path, tiny_model_dir,
                                                                   no_model_loads, capsys):
    heads = published_eagle(tmp_path / "heads", **plant)
    if "config" not in plant:  # a heads folder of this tool names its kind
        cfg = json.loads((heads / "config.json").read_text())
        (heads / "config.json").write_text(json.dumps({**cfg, "specbench": {"kind": "eagle"}}))
    line = one_error_line(*cli(["run", "--model", str(tiny_model_dir), "--methods", "eagle", "--heads", str(heads)],
                               capsys))
    assert str(heads) in line and message in line


def test_a_shard_index_naming_a_file_outside_the_folder_is_refused(tmp_path, capsys):
    src = tmp_path / "medusa2"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"medusa_num_heads": 2, "hidden_size": 32}))
    (tmp_path / "elsewhere.safetensors").write_bytes(safetensors_bytes({}))
    (src / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"medusa_head.0.0.linear.weight": "../elsewhere.safetensors"}}))
    line = one_error_line(*cli(["heads", "import", str(src), "--out", str(tmp_path / "heads")], capsys))
    assert "model.safetensors.index.json: not a shard index (a weight file is not a file name in" in line
    (src / "model.safetensors.index.json").write_text(DEEP)
    line = one_error_line(*cli(["heads", "import", str(src), "--out", str(tmp_path / "heads")], capsys))
    assert "model.safetensors.index.json: not valid JSON (nested deeper than 100 levels)" in line


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize("raw,message", [
    (b"\x01\x00", "shorter than the 8-byte header length"),
    (struct.pack("<Q", 200 << 20) + b"{}", "a header of 209715200 bytes, more than the 100 MB"),
    (struct.pack("<Q", 1000) + b"{}", "a header of 1000 bytes in a file of 10 (truncated or damaged)"),
    (struct.pack("<Q", 806) + b'{"w":' + b"[" * 400 + b"]" * 400 + b"}", "its header nests JSON deeper than 100"),
    (struct.pack("<Q", 4) + b"{\xff}}", "its header is not UTF-8 text"),
    (struct.pack("<Q", 2) + b"[]", "its header is not a JSON object"),
    (struct.pack("<Q", 2) + b"{x", "its header is not JSON"),
    (safetensors_bytes({"w": {**F32, "dtype": "F99"}}, b"\0" * 8), "tensor 'w': unknown dtype \"F99\""),
    (safetensors_bytes({"w": {**F32, "shape": [-2]}}, b"\0" * 8), "the shape must be a list of non-negative integers"),
    (safetensors_bytes({"w": {**F32, "shape": [True, 2]}}, b"\0" * 8), "the shape must be a list of non-negative"),
    (safetensors_bytes({"w": {**F32, "shape": [2.0]}}, b"\0" * 8), "the shape must be a list of non-negative"),
    (safetensors_bytes({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), "must hold dtype, shape and data_offsets"),
    (safetensors_bytes({"w": {**F32, "data_offsets": [8, 0]}}, b"\0" * 8), "data_offsets must be two integers"),
    (safetensors_bytes({"w": {**F32, "data_offsets": [0, 12]}}, b"\0" * 12), "of F32 is 8 bytes, its data_offsets hold 12"),
    (safetensors_bytes({"w": F32}, b"\0" * 4), "tensor 'w' ends at byte 8 of the data, the file holds 4"),
    (safetensors_bytes({"w": F32, "v": F32}, b"\0" * 8), "starts at byte 0 of the data, expected 8 (tensors overlap"),
    (safetensors_bytes({"w": {**F32, "data_offsets": [4, 12]}}, b"\0" * 12), "starts at byte 4 of the data, expected 0"),
    (safetensors_bytes({"w": F32}, b"\0" * 12), "bytes but its header describes"),
    (safetensors_bytes({"__metadata__": {"format": 1}}), "'__metadata__' must map names to strings"),
    (struct.pack("<Q", 32) + b'{"w": {}, "w": {}}'.ljust(32), "the key 'w' appears twice"),
])
def test_a_damaged_safetensors_header_is_one_error_naming_the_file(raw, message, tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(raw)
    with pytest.raises(UsageError) as e:
        read_header(path)
    assert str(e.value).startswith(str(path)) and message in str(e.value), str(e.value)


def test_a_good_safetensors_header_reads_as_the_library_writes_it(tmp_path):
    import torch
    from safetensors.torch import save_file

    state = {"a": torch.zeros(3, 4), "b": torch.ones(0, 5, dtype=torch.bfloat16), "c": torch.arange(7)}
    save_file(state, str(tmp_path / "w.safetensors"), metadata={"format": "pt"})
    header = read_header(tmp_path / "w.safetensors")
    assert {k: (v["dtype"], v["shape"]) for k, v in header.items()} == \
        {"a": ("F32", [3, 4]), "b": ("BF16", [0, 5]), "c": ("I64", [7])}


def test_the_datastore_build_hint_names_the_rest_extra(tmp_path, monkeypatch, capsys):
    """Console markup ate `[rest]` from `pip install 'specbench-cli[rest]'`."""
    import specbench_cli.models.load

    monkeypatch.setattr(store, "has_library", lambda: False)
    monkeypatch.setattr(specbench_cli.models.load, "load_tokenizer", lambda *a, **k: make_tokenizer())
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "the cat sat on the mat"}) + "\n")
    code, out, err = cli(["datastore", "build", "--from", str(corpus), "--out", str(tmp_path / "ds")], capsys)
    assert code == 0, err
    assert "pip install 'specbench-cli[rest]' and build again" in " ".join(err.split())
