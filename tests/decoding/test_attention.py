"""`--forward short` and `--forward lean` give SDPA's logits (causal blocks after a cache, tree
masks, bool masks, the long-prefill fallback) and keep every lossless method equal to AR; the
flag is checked before any model loads and recorded in the manifest."""

from __future__ import annotations

import json
import os
import random

import pytest
import torch
from helpers.artifacts import artifact_options
from helpers.tiny import EOS, VOCAB, make_model

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import path_to, tree_inputs
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target
from specbench_cli.targets.hf.forward import lean
from specbench_cli.targets.hf.forward import short as attention
from specbench_cli.targets.hf.kv import KVCache

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


def native_forward(model):
    """The native forward on `model`, or the test skipped when this machine cannot build it (no C
    compiler; CI has one, so there the tests run)."""
    from specbench_cli.targets.hf.forward.native.model import install

    try:
        return install(model)
    except RuntimeError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the native forward is unavailable here: {e}")


@pytest.fixture(scope="module", params=["short", "lean", "native"])
def pair(request):
    """The same tiny GQA model (4 query heads over 2 key/value heads) twice: sdpa, and short, lean
    or native (the C library, skipped where no C compiler builds it)."""
    attention.register()
    ref, fast = make_model(0), make_model(0)
    fast.set_attn_implementation("short")
    assert fast.config._attn_implementation == "short"
    if request.param in ("lean", "native"):
        lean.install(fast)
        assert fast.model._specbench_lean
    if request.param == "native":
        native_forward(fast)
    return ref, fast


def _step(model, prompt, block, **kw):
    cache = KVCache()
    model(input_ids=torch.tensor([prompt]), past_key_values=cache.hf, use_cache=True)
    return model(input_ids=torch.tensor([block]), past_key_values=cache.hf, use_cache=True, **kw).logits[0]


@torch.inference_mode()
@pytest.mark.parametrize("q", [1, 2, 10, attention.SHORT_MAX_Q])
def test_causal_blocks_after_a_cache_match_sdpa(pair, q):
    ref, short = pair
    rng = random.Random(q)
    block = [rng.randrange(4, VOCAB) for _ in range(q)]
    torch.testing.assert_close(_step(short, PROMPT, block), _step(ref, PROMPT, block), atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_long_prefill_falls_back_and_matches(pair):
    ref, short = pair
    rng = random.Random(1)
    prompt = [rng.randrange(4, VOCAB) for _ in range(attention.SHORT_MAX_Q + 30)]
    got = short(input_ids=torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(got, ref(input_ids=torch.tensor([prompt])).logits[0], atol=1e-5, rtol=1e-5)
    # a long block after a cache goes through SDPA with a bool mask, also right
    block = prompt[:attention.SHORT_MAX_Q + 5]
    torch.testing.assert_close(_step(short, PROMPT, block), _step(ref, PROMPT, block), atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_tree_mask_forward_equals_each_path_run_as_its_own_chain(pair):
    _, short = pair
    rng = random.Random(0)
    parents = [-1 if i == 0 else rng.randrange(-1, i) for i in range(12)]
    tokens = [rng.randrange(4, VOCAB) for _ in parents]
    cache = KVCache()
    short(input_ids=torch.tensor([PROMPT]), past_key_values=cache.hf, use_cache=True)
    mask, pos = tree_inputs(parents, cache.length, torch.float32, "cpu")
    tree = short(input_ids=torch.tensor([[11] + tokens]), attention_mask=mask, position_ids=pos,
                 past_key_values=cache.hf, use_cache=True).logits[0]
    for node in range(len(parents)):
        chain = [11] + [tokens[i] for i in path_to(parents, node)]
        want = short(input_ids=torch.tensor([PROMPT + chain])).logits[0, -1]
        torch.testing.assert_close(tree[node + 1], want, atol=1e-4, rtol=1e-4)


def test_bool_masks_hide_what_they_say(pair):
    """transformers hands the kernel a bool mask (True = visible) in some cases: equal to the additive one."""
    _, short = pair
    layer = short.model.layers[0].self_attn
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, n, 8, generator=g) for h, n in ((4, 3), (2, 7), (2, 7)))
    visible = torch.rand(1, 1, 3, 7, generator=g) > 0.4
    visible[..., -3:] = torch.eye(3, dtype=torch.bool)  # every row sees itself
    additive = torch.zeros(1, 1, 3, 7).masked_fill(~visible, torch.finfo(torch.float32).min)
    a, _ = attention.short_attention(layer, q, k, v, visible, scaling=0.3)
    b, _ = attention.short_attention(layer, q, k, v, additive, scaling=0.3)
    torch.testing.assert_close(a, b)
    full = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                            attn_mask=visible, scale=0.3)
    torch.testing.assert_close(a, full.transpose(1, 2))


# head methods read the target's hidden states: the lean body must give them too (tiny heads of
# every kind); methods that need another artifact (a draft model, a datastore) are left out
@pytest.mark.parametrize("name", [n for n in methods.names() if methods.get(n).lossless and n != "ar"
                                  and set(methods.get(n).requires) <= {"heads"}])
def test_lossless_methods_equal_ar_under_short_attention(pair, tiny_tok, name, request):
    if request.node.callspec.params.get("pair") == "native":  # the same methods, heads too, at five budgets:
        pytest.skip("tests/methods/test_lossless.py runs them on the native forward")  # its `native` target
    _, short = pair
    dec = Decoder(as_target(short), {EOS})
    ctx = MethodContext(short, tiny_tok, budget=10)
    options = artifact_options(methods.get(name), request)
    ar, method = methods.get("ar").create(ctx), methods.get(name).create(ctx, **options)
    for prompt in ([2, 40, 41, 42, 40, 41, 42, 40, 41], PROMPT):
        assert dec.generate(method, prompt, 40, 10).output_ids == dec.generate(ar, prompt, 40, 10).output_ids


def test_unknown_attn_exits_2_before_loading(tmp_path, capsys):
    from helpers.cli import cli

    code, _, err = cli(["run", "--forward", "flash"], capsys)
    assert code == 2 and "unknown forward 'flash'" in err and "lean" in err


@pytest.mark.parametrize("forward,used", [("short", "short"), ("lean", "lean"), (None, "native"),
                                          ("auto", "native"), ("native", "native"), ("sdpa", "sdpa")])
def test_manifest_records_the_forward(tiny_model_dir, tmp_path, capsys, forward, used):
    """The flag as given (`config.forward`, default `auto`) and the path the target ran
    (`model.forward`): `auto` is `native` for the tiny Llama on CPU in float32 (where a C
    compiler builds the library, as on every machine the tests run on)."""
    from helpers.cli import cli

    out = tmp_path / "res"
    code, _, _ = cli(["run", "--model", str(tiny_model_dir), "--methods", "pld", "--limit", "1", "--categories",
                      "qa", "--max-new-tokens", "8", "--output-dir", str(out), "--no-report",
                      *(["--forward", forward] if forward else [])], capsys)
    assert code == 0
    (run,) = out.iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["forward"] == (forward or "auto") and manifest["model"]["forward"] == used


def test_auto_forward_is_lean_only_for_a_plain_llama_on_cpu():
    from types import SimpleNamespace as NS

    from specbench_cli.targets.hf.forward.modes import resolve

    llama = NS(model_type="llama", attention_bias=False, mlp_bias=False, hidden_act="silu")
    assert resolve("auto", llama, "cpu") == "lean"
    assert resolve("auto", llama, "cuda") == resolve("auto", llama, "cuda:0") == "sdpa"
    assert resolve("auto", NS(**{**vars(llama), "attention_bias": True}), "cpu") == "sdpa"
    assert resolve("auto", NS(**{**vars(llama), "hidden_act": "gelu"}), "cpu") == "sdpa"
    assert resolve("auto", NS(model_type="qwen2"), "cpu") == "sdpa"
    assert resolve("short", NS(model_type="qwen2"), "cuda") == "short"  # an explicit choice is kept


def test_lean_stores_no_weight_twice_and_refuses_other_architectures():
    model = make_model(0)
    before = sum(p.numel() for p in model.parameters())
    lean.install(model)
    layer = model.model.layers[0]
    a = layer.self_attn
    # q/k/v are views into one fused [out, in] matrix
    assert a.q_proj.weight.untyped_storage().data_ptr() == layer._qkv.untyped_storage().data_ptr()
    assert a.v_proj.weight.untyped_storage().data_ptr() == layer._qkv.untyped_storage().data_ptr()
    assert layer._qkv.is_contiguous()
    assert sum(p.numel() for p in model.parameters()) == before
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB))
    assert "Llama-architecture models only" in lean.unsupported_reason(gpt2)


@torch.inference_mode()
def test_lean_takes_input_embeddings_and_a_trivial_padding_mask():
    ref, fast = make_model(0), make_model(0)
    lean.install(fast)
    ids = torch.tensor([PROMPT])
    emb = ref.get_input_embeddings()(ids)
    want = ref(inputs_embeds=emb).logits
    torch.testing.assert_close(fast(inputs_embeds=emb.clone()).logits, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast(input_ids=ids, attention_mask=torch.ones_like(ids)).logits, want,
                               atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_load_model_lean_on_a_tied_model_counts_params_once_and_matches_sdpa(tmp_path):
    from helpers.tiny import save_tiny

    from specbench_cli.models.load import load_model

    save_tiny(tmp_path / "tied", seed=1, tie=True)
    ref, fast = load_model(str(tmp_path / "tied")), load_model(str(tmp_path / "tied"), forward="lean")
    assert fast.params == ref.params
    # the tied head still shares the embedding; a kernel form the plan chose is an extra copy, recorded
    assert fast.model.lm_head.weight.data_ptr() == fast.model.model.embed_tokens.weight.data_ptr()
    assert fast.kernels["mode"] == "auto" and fast.kernels["extra_weight_bytes"] >= 0 and fast.kernels["plan"]
    ids = torch.tensor([PROMPT])
    torch.testing.assert_close(fast.model(input_ids=ids).logits, ref.model(input_ids=ids).logits, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def smol_lean():
    pytest.importorskip("gguf")
    from specbench_cli.models.load import load_model

    try:
        return load_model("smollm2-135m", forward="lean", kernels="mkl")  # fixed kernels: nothing timed
    except Exception as e:  # noqa: BLE001 - the package with the model is optional
        pytest.skip(f"embedded model unavailable: {e}")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in methods.names() if methods.get(n).lossless
                                  and not methods.get(n).needs_training and n != "ar"])
def test_lean_methods_equal_ar_on_the_real_model(smol_lean, name):
    from specbench_cli import tasks
    from specbench_cli.models.prompting import ChatPrompter

    prompter = ChatPrompter(smol_lean.tokenizer)
    qs = {q.id: q for q in tasks.get("mini").load()}
    dec = Decoder(as_target(smol_lean.model), {smol_lean.tokenizer.eos_token_id})
    ctx = MethodContext(smol_lean.model, smol_lean.tokenizer, budget=10)
    ar, method = methods.get("ar").create(ctx), methods.get(name).create(ctx)
    for qid in ("s1", "t1"):  # summarization and translation: copy-heavy, drafts get accepted
        ids = prompter([{"role": "user", "content": qs[qid].turns[0]}])
        assert dec.generate(method, ids, 40, 10).output_ids == dec.generate(ar, ids, 40, 10).output_ids
