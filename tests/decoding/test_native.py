"""The native forward (targets/hf/forward/native/): the same function as the lean forward, a row's
bits independent of the block and the batch it is computed in, and a library cache that rebuilds
what is not its own and a machine without a compiler that falls back with one line."""

from __future__ import annotations

import os
import random

import pytest
import torch
from helpers.tiny import EOS, VOCAB, make_model

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import tree_inputs
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target
from specbench_cli.targets.hf.forward import lean, native
from specbench_cli.targets.hf.forward.native.model import install
from specbench_cli.targets.hf.kv import KVCache

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


def _native(model, cache_dir=None):
    try:
        return install(model, cache_dir)
    except RuntimeError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the native forward is unavailable here: {e}")


@pytest.fixture(scope="module", params=[32, 256], ids=["head8", "head64"])
def models(request):
    """The tiny GQA Llama on the lean forward and the same weights on the native forward: heads of
    8 (the library's scalar paths) and of 64 (its vector paths: keys transposed in registers, the
    values weighted by slices), over key blocks that end mid-vector."""
    ref, fast = make_model(0, hidden=request.param), make_model(0, hidden=request.param)
    lean.install(ref)
    _native(fast)
    return ref, fast


def _after_prompt(model, block, **kw):
    cache = KVCache()
    model(input_ids=torch.tensor([PROMPT]), past_key_values=cache.hf, use_cache=True)
    return model(input_ids=torch.tensor([block]), past_key_values=cache.hf, use_cache=True, **kw).logits[0], cache


@torch.inference_mode()
@pytest.mark.parametrize("q", [1, 3, 10, 13, 64])
def test_blocks_match_the_lean_forward(models, q):
    ref, fast = models
    block = [random.Random(q).randrange(4, VOCAB) for _ in range(q)]
    torch.testing.assert_close(_after_prompt(fast, block)[0], _after_prompt(ref, block)[0], atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_a_block_gives_the_bits_of_one_token_steps(models):
    """Verifying q tokens at once gives each position exactly what feeding them one by one gives."""
    _, fast = models
    block = [random.Random(7).randrange(4, VOCAB) for _ in range(13)]
    whole, _ = _after_prompt(fast, block)
    steps, cache = _after_prompt(fast, block[:1])
    rows = [steps[0]]
    for token in block[1:]:
        rows.append(fast(input_ids=torch.tensor([[token]]), past_key_values=cache.hf, use_cache=True).logits[0, 0])
    assert torch.equal(whole, torch.stack(rows))


@torch.inference_mode()
def test_a_tree_row_gives_the_bits_of_its_path_as_steps(models):
    """A tree-masked verify row equals, bit for bit, its own path decoded one token at a time."""
    _, fast = models
    rng = random.Random(3)
    parents = [-1 if i == 0 else rng.randrange(-1, i) for i in range(9)]
    tokens = [rng.randrange(4, VOCAB) for _ in parents]
    cache = KVCache()
    fast(input_ids=torch.tensor([PROMPT]), past_key_values=cache.hf, use_cache=True)
    mask, pos = tree_inputs(parents, cache.length, torch.float32, "cpu")
    tree = fast(input_ids=torch.tensor([[11] + tokens]), attention_mask=mask, position_ids=pos,
                past_key_values=cache.hf, use_cache=True).logits[0]
    for node in (0, 4, 8):
        path, i = [], node
        while i >= 0:
            path.append(i)
            i = parents[i]
        chain = [11] + [tokens[j] for j in reversed(path)]
        c = KVCache()
        fast(input_ids=torch.tensor([PROMPT]), past_key_values=c.hf, use_cache=True)
        last = None
        for token in chain:
            last = fast(input_ids=torch.tensor([[token]]), past_key_values=c.hf, use_cache=True).logits[0, 0]
        assert torch.equal(tree[node + 1], last)


@torch.inference_mode()
def test_threads_sharing_the_tiles_change_no_bit(models):
    """However the threads share a product's tiles (each its own share, then tiles taken from the
    back of the others' when it is done early, which depends on timing), every output is computed
    exactly once: one, two and three threads give the same bits, call after call."""
    _, fast = models
    block = [random.Random(5).randrange(4, VOCAB) for _ in range(10)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        want, _ = _after_prompt(fast, block)
        for n in (2, 3):
            torch.set_num_threads(n)
            for _ in range(10):
                assert torch.equal(_after_prompt(fast, block)[0], want)
    finally:
        torch.set_num_threads(before)


def test_a_batch_decodes_each_sequence_as_alone(models, tiny_tok):
    _, fast = models
    dec = Decoder(as_target(fast), {EOS})
    ctx = MethodContext(fast, tiny_tok, budget=8)
    prompts = [PROMPT, [2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 9, 9, 30]]
    for name in ("ar", "pld"):
        alone = [dec.generate(methods.get(name).create(ctx), p, 24, 8).output_ids for p in prompts]
        batch = dec.generate_batch([methods.get(name).create(ctx) for _ in prompts], prompts, [24] * 3, 8)
        assert [g.output_ids for g in batch] == alone


def test_the_cached_library_is_rebuilt_when_it_is_not_ours(tmp_path, monkeypatch):
    """A damaged library (not the size and hash recorded) or a link at its name is built again;
    the link's target is never written. Each case in a folder of its own: a library this process
    has loaded is never damaged under it."""
    import shutil

    monkeypatch.setattr(native, "_loaded", {})
    lib, why = native.load(tmp_path / "built")
    if lib is None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    (built,) = (tmp_path / "built").glob("*.so")
    record = built.with_suffix(".json")
    good = built.read_bytes()

    damaged = tmp_path / "damaged"
    damaged.mkdir()
    shutil.copy(record, damaged / record.name)
    (damaged / built.name).write_bytes(b"not a library")
    monkeypatch.setattr(native, "_loaded", {})
    assert native.load(damaged)[0] is not None
    assert (damaged / built.name).stat().st_size == len(good)

    linked = tmp_path / "linked"
    linked.mkdir()
    shutil.copy(record, linked / record.name)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    (linked / built.name).symlink_to(victim)
    monkeypatch.setattr(native, "_loaded", {})
    assert native.load(linked)[0] is not None
    assert not (linked / built.name).is_symlink() and victim.read_bytes() == b"keep me"


def test_no_compiler_falls_back_to_lean_with_one_line(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from specbench_cli.models.load import load_model
    from specbench_cli.targets.hf import load as hf_load

    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native, "compiler", lambda: None)
    monkeypatch.setattr(hf_load, "_said_native", set())
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    notes: list[str] = []
    lm = load_model(str(tiny_model_dir), forward="auto", kernels="mkl", note=notes.append)
    assert lm.target.describe()["forward"] == "lean"
    assert len(notes) == 1 and "no C compiler" in notes[0] and "lean forward runs instead" in notes[0]
    load_model(str(tiny_model_dir), forward="auto", kernels="mkl", note=notes.append)
    assert len(notes) == 1  # said once per process
    from specbench_cli.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match="--forward native: no C compiler"):
        load_model(str(tiny_model_dir), forward="native", kernels="mkl")
