"""DFlash: the drafter in z-lab's published layout loads and runs (directly and imported), a
folder made for another target is refused before the target loads, one block forward drafts the
chain cut to the budget, the training blocks are the inference blocks, and training lowers the
loss and resumes exactly; the drafter computes z-lab's forward (written out from the tensors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args
from helpers.tiny import EOS
from helpers.tiny_dflash import BLOCK, TARGET_LAYERS, recipe, tiny_dflash_cache

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.drafter import DecodeState
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target

PROMPTS = [[2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14], [2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 77]]


def write_zlab(src: Path, trained: str, **changes) -> Path:
    """`trained`'s weights in z-lab's published layout: their config.json (a Qwen3 config with
    `architectures`, `auto_map` to the folder's own dflash.py, `block_size`, `num_target_layers`,
    `dflash_config`), model.safetensors with their tensor names, and their dflash.py (never run)."""
    from safetensors.torch import load_file, save_file

    ours = json.loads((Path(trained) / "config.json").read_text())
    dc = ours["dflash_config"]
    cfg = {"architectures": ["DFlashDraftModel"], "attention_bias": False, "attention_dropout": 0.0,
           "auto_map": {"AutoModel": "dflash.DFlashDraftModel"}, "block_size": dc["block_size"], "bos_token_id": 2,
           "dflash_config": {"mask_token_id": dc["mask_token_id"], "target_layer_ids": dc["target_layer_ids"]},
           "dtype": "float32", "eos_token_id": EOS, "head_dim": ours["head_dim"], "hidden_act": "silu",
           "hidden_size": ours["hidden_size"], "initializer_range": 0.02,
           "intermediate_size": ours["intermediate_size"],
           "layer_types": ["full_attention"] * ours["num_hidden_layers"],
           "max_position_embeddings": ours["max_position_embeddings"], "max_window_layers": ours["num_hidden_layers"],
           "model_type": "qwen3", "num_attention_heads": ours["num_attention_heads"],
           "num_hidden_layers": ours["num_hidden_layers"], "num_key_value_heads": ours["num_key_value_heads"],
           "num_target_layers": ours["num_target_layers"], "rms_norm_eps": ours["rms_norm_eps"],
           "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": None, "tie_word_embeddings": False,
           "transformers_version": "4.57.1", "use_cache": True, "use_sliding_window": False,
           "vocab_size": ours["vocab_size"]}
    for key, value in changes.items():
        if key in ("mask_token_id", "target_layer_ids"):
            cfg["dflash_config"][key] = value
        else:
            cfg[key] = value
    src.mkdir(parents=True, exist_ok=True)
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    state = load_file(str(Path(trained) / "model.safetensors"))
    if "hidden_size" in changes:  # a drafter of another width: its own (random) weights of that shape
        from specbench_cli.methods.heads.dflash.model import DFlashDrafter

        state = {k: v.contiguous() for k, v in DFlashDrafter(cfg).state_dict().items() if not k.startswith("rotary.")}
    save_file(state, str(src / "model.safetensors"), metadata={"format": "pt"})
    (src / "dflash.py").write_text("raise RuntimeError('published code must never run')\n")
    return src


@pytest.fixture(scope="module")
def trained(tiny_head_folders):
    return tiny_head_folders["dflash"]


def _decode(model, tok, heads, budget, prompt, sampling=None):
    method = methods.get("dflash").create(MethodContext(model, tok, budget=budget), heads=str(heads))
    return Decoder(as_target(model), {EOS}).generate(method, prompt, 40, budget)


def test_the_published_layout_runs_directly_and_imported_and_equals_ours(trained, tiny_model, tiny_tok, tmp_path,
                                                                         capsys):
    src = write_zlab(tmp_path / "Tiny-DFlash-b6", trained)
    code, _, err = cli(["heads", "import", str(src), "--out", str(tmp_path / "imported")], capsys)
    assert code == 0, err
    cfg = json.loads((tmp_path / "imported" / "config.json").read_text())
    assert cfg["specbench"]["kind"] == "dflash" and "auto_map" not in cfg
    assert not (tmp_path / "imported" / "dflash.py").exists()
    ar = methods.get("ar").create(MethodContext(tiny_model, tiny_tok, budget=1))
    accepted = 0
    for prompt in PROMPTS:
        ref = Decoder(as_target(tiny_model), {EOS}).generate(ar, prompt, 40, 1).output_ids
        runs = [_decode(tiny_model, tiny_tok, folder, 8, prompt) for folder in (trained, src, tmp_path / "imported")]
        assert all(g.output_ids == ref for g in runs)
        assert runs[0].accept_lengths == runs[1].accept_lengths == runs[2].accept_lengths  # the same drafts
        accepted += sum(a - 1 for a in runs[0].accept_lengths)
    assert accepted > 0


def test_a_published_folder_runs_through_the_cli(trained, tiny_model_dir, tmp_path, capsys):
    src = write_zlab(tmp_path / "published", trained)
    args = tiny_run_args(tiny_model_dir, tmp_path / "runs", "--heads", str(src), "--batch-size", "2")
    args[args.index("ar,pld")] = "ar,dflash"
    code, _, err = cli(args, capsys)
    assert code == 0, err
    rows = run_rows(only_run_dir(tmp_path / "runs"))
    by: dict = {}
    for r in rows:
        by.setdefault(r["method"], {})[(r["question_id"], r["turn"])] = r["output_ids"]
    assert by["dflash"] == by["ar"] and len(by["ar"]) == 3


@pytest.mark.parametrize("changes, message", [
    ({"hidden_size": 64, "head_dim": 16}, "config.json's 'hidden_size' is 64, the target"),
    ({"target_layer_ids": [0, 5]}, "reads target layers [0, 5], the target has 2 layers"),
    ({"num_target_layers": 36}, "'num_target_layers' is 36, the target has 2 layers"),
    ({"architectures": ["DFlash2DraftModel"], "dflash_config": {"selector_rank": 8}}, "DFlash-2"),
    ({"target_layer_ids": []}, "target_layer_ids' must be a non-empty list"),
])
def test_a_folder_for_another_target_exits_2_before_the_model_loads(changes, message, trained, tiny_model_dir,
                                                                    tmp_path, capsys, monkeypatch):
    import specbench_cli.models.load

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad-input case")

    monkeypatch.setattr(specbench_cli.models.load, "load_model", refuse)
    src = write_zlab(tmp_path / "published", trained, **changes)
    args = tiny_run_args(tiny_model_dir, tmp_path / "runs", "--heads", str(src))
    args[args.index("ar,pld")] = "ar,dflash"
    code, _, err = cli(args, capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_one_block_forward_drafts_the_chain_cut_to_the_budget(trained, tiny_model, tiny_tok):
    prompt = PROMPTS[0]
    with torch.no_grad():
        out = tiny_model.get_decoder()(input_ids=torch.tensor([prompt]), output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i + 1][0] for i in TARGET_LAYERS], dim=-1)
    first = int(tiny_model.get_output_embeddings()(out.last_hidden_state[0, -1]).argmax())
    for budget, size in ((1, 0), (2, 1), (4, 3), (30, BLOCK - 1)):
        m = methods.get("dflash").create(MethodContext(tiny_model, tiny_tok, budget=budget), heads=trained)
        assert m.hidden_layers == tuple(i + 1 for i in TARGET_LAYERS)
        m.reset(prompt)
        calls = []
        forward = m.head.block_states
        m.head.block_states = lambda *a, **k: calls.append(a[1].shape) or forward(*a, **k)
        draft = m.propose(DecodeState(ids=prompt + [first], prompt_len=len(prompt), budget=budget, remaining=40,
                                      hidden=feats))
        assert len(draft) == size and draft.is_chain
        assert calls == ([] if size == 0 else [torch.Size([1, BLOCK])])  # one forward, always the whole block


def test_training_blocks_are_the_inference_blocks(trained, tiny_model):
    """The trainer's many-blocks forward (each block seeing the context before its anchor) gives
    the logits the method gets for that block from its cache."""
    from specbench_cli.methods.heads.checkpoint import load_heads
    from specbench_cli.methods.heads.dflash.training import dflash_forward

    head = load_heads(Path(trained), tiny_model)
    seq = PROMPTS[0] + [40, 41, 42, 9, 14]
    with torch.no_grad():
        out = tiny_model.get_decoder()(input_ids=torch.tensor([seq]), output_hidden_states=True)
        feats = torch.cat([out.hidden_states[i + 1] for i in TARGET_LAYERS], dim=-1)  # [1, T, 2h]
        anchors = torch.tensor([[3, 8, 15]])
        together = head.logits(dflash_forward(head, feats, torch.tensor([seq]), torch.ones(1, len(seq), dtype=torch.bool),
                                              anchors))[0, :, 1:]
        for j, a in enumerate(anchors[0].tolist()):
            cache = head.new_cache()
            head.absorb(cache, feats[0, :a])
            torch.testing.assert_close(together[j], head.draft_logits(cache, seq[a]), rtol=1e-4, atol=1e-4)


def test_training_lowers_the_loss_and_resumes_exactly(tiny_model, tmp_path, monkeypatch):
    """A run interrupted after its step-4 checkpoint (in step 6), then resumed, ends with the
    weights and losses of the uninterrupted run."""
    import dataclasses

    import specbench_cli.training.heads.dflash as trainer
    from specbench_cli.methods.heads.checkpoint import inspect_heads, load_heads
    from specbench_cli.training.heads.train import train_heads

    cache = tiny_dflash_cache(tiny_model)
    r = recipe(8, save_every=4, batch_size=3, lr=3e-3)
    train_heads(tiny_model, cache, r, tmp_path / "a", {}, progress=False)
    hooks, losses = trainer.HOOKS, trainer.HOOKS.losses

    def interrupted(head, batch, weight, rec, step):
        if step == 5:
            raise KeyboardInterrupt
        return losses(head, batch, weight, rec, step)

    monkeypatch.setattr(trainer, "HOOKS", dataclasses.replace(hooks, losses=interrupted))
    with pytest.raises(KeyboardInterrupt):
        train_heads(tiny_model, cache, r, tmp_path / "b", {}, progress=False)
    monkeypatch.setattr(trainer, "HOOKS", hooks)
    train_heads(tiny_model, cache, r, tmp_path / "b", {}, resume=True, progress=False)
    ha = json.loads((tmp_path / "a" / "history.json").read_text())
    hb = json.loads((tmp_path / "b" / "history.json").read_text())
    assert [h["step"] for h in hb] == list(range(1, 9))
    for x, y in zip(ha, hb):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5)
    a, b = load_heads(tmp_path / "a").state_dict(), load_heads(tmp_path / "b").state_dict()
    for k, v in a.items():
        assert torch.allclose(v, b[k], atol=1e-6), k
    assert inspect_heads(tmp_path / "a")[0] == "dflash"
    # a few steps lower the loss on the same blocks (every sequence, the same anchors)
    from specbench_cli.methods.heads.dflash.training import build_dflash, dflash_loss
    from specbench_cli.training.heads.eagle3 import make_eagle3_batch

    r = recipe(40, lr=1e-2)
    train_heads(tiny_model, cache, r, tmp_path / "c", {}, progress=False)
    batch = make_eagle3_batch(cache, list(range(len(cache))))
    with torch.no_grad():
        before = dflash_loss(build_dflash(tiny_model, r), batch, 8, None, torch.Generator().manual_seed(1))[0]
        after = dflash_loss(load_heads(tmp_path / "c", tiny_model), batch, 8, None, torch.Generator().manual_seed(1))[0]
    assert after < 0.6 * before, (float(before), float(after))


def test_position_weights_follow_the_paper():
    from specbench_cli.methods.heads.dflash.training import loss_gamma, sample_anchors

    assert (loss_gamma(16), loss_gamma(10), loss_gamma(8), loss_gamma(16, 3.0)) == (7.0, 5.0, 4.0, 3.0)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[0, 4:9] = True
    mask[1, 7] = True
    anchors, keep = sample_anchors(mask, 3, torch.Generator().manual_seed(0))
    assert all(4 <= a < 9 for a in anchors[0].tolist()) and keep[0].all() and len(set(anchors[0].tolist())) == 3
    assert anchors[1].tolist() == [7, 7, 7] and keep[1].tolist() == [True, False, False]


def test_cli_trains_a_drafter_that_runs(tmp_path, capsys, tiny_model_dir):
    data = tmp_path / "d.jsonl"
    words = ["sea", "sun", "dog", "cat"]
    data.write_text("".join(json.dumps({"instruction": f"write a poem about the {w}",
                                        "response": " ".join(["the cat sat on mat", w] * 5), "finished": True,
                                        "target": str(tiny_model_dir)}) + "\n" for w in words))
    code, _, err = cli(["train", "heads", "--data", str(data), "--out", str(tmp_path / "h"), "--kind", "dflash",
                        "--block-size", "4", "--target-layers", "0,1", "--steps", "3", "--save-every", "2", "-q"],
                       capsys)
    assert code == 0, err
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["dflash_config"]["block_size"] == 4 and cfg["dflash_config"]["target_layer_ids"] == [0, 1]
    args = tiny_run_args(tiny_model_dir, tmp_path / "runs", "--heads", str(tmp_path / "h"))
    args[args.index("ar,pld")] = "ar,dflash"
    code, _, err = cli(args, capsys)
    assert code == 0, err
    by: dict = {}
    for r in run_rows(only_run_dir(tmp_path / "runs")):
        by.setdefault(r["method"], {})[(r["question_id"], r["turn"])] = r["output_ids"]
    assert by["dflash"] == by["ar"]
    code, _, err = cli(["train", "heads", "--data", str(data), "--out", str(tmp_path / "h2"), "--kind", "dflash",
                        "--target-layers", "0,7", "--target", str(tiny_model_dir)], capsys)
    assert code == 2 and "--target-layers 0,7: the target has 2 layers" in err, err


def test_bc_auto_picks_a_budget_and_stays_lossless(trained, tiny_model_dir, isolated_cache, tmp_path, capsys):
    src = write_zlab(tmp_path / "published", trained)
    args = tiny_run_args(tiny_model_dir, tmp_path / "runs", "-o", f"dflash.heads={src}", "--auto-candidates", "2,4",
                         "--auto-questions", "1", "--auto-tokens", "5", "--batch-size", "2")
    args[args.index("ar,pld")] = "ar,dflash@auto"
    code, _, err = cli(args, capsys)
    assert code == 0, err
    rows = run_rows(only_run_dir(tmp_path / "runs"))
    mine = [r for r in rows if r["method"] == "dflash@auto"]
    assert mine and {r["block_complexity"] for r in mine} <= {2, 4}
    assert all(r["ar_match"] and max(r["budget_used"]) <= r["block_complexity"] for r in mine)


@pytest.mark.parametrize("owner", ["samd", "suffix"])
def test_as_the_fallback_of_samd_and_suffix_it_stays_lossless(owner, trained, tiny_model, tiny_tok):
    """Their own steps feed the drafter's context cache (`absorb`), so its steps draft right."""
    ar = methods.get("ar").create(MethodContext(tiny_model, tiny_tok, budget=1))
    for prompt in PROMPTS:
        ref = Decoder(as_target(tiny_model), {EOS}).generate(ar, prompt, 40, 1).output_ids
        m = methods.get(owner).create(MethodContext(tiny_model, tiny_tok, budget=8), fallback="dflash", heads=trained)
        assert Decoder(as_target(tiny_model), {EOS}).generate(m, prompt, 40, 8).output_ids == ref


def _reference_block_logits(state: dict, cfg: dict, model, feats: torch.Tensor, root: int) -> torch.Tensor:
    """z-lab's drafter forward written out from the tensors: context = hidden_norm(fc(features)),
    each layer's keys/values = its k/v projections of [context; normed block], queries from the
    block only, q/k head norms, RoPE at the sequence positions, no mask; final norm, target LM head."""
    import math

    import torch.nn.functional as F

    dc = cfg["dflash_config"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, bs = cfg["rms_norm_eps"], cfg["block_size"]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rope(z, pos):  # [n, heads, d] at positions [n]
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
        ang = pos[:, None].float() * inv[None]
        cos, sin = torch.cat([ang, ang], -1).cos()[:, None], torch.cat([ang, ang], -1).sin()[:, None]
        return z * cos + torch.cat([-z[..., hd // 2:], z[..., :hd // 2]], -1) * sin

    s = feats.shape[0]
    ctx = rms(feats @ state["fc.weight"].T, state["hidden_norm.weight"])
    x = model.get_input_embeddings()(torch.tensor([root] + [dc["mask_token_id"]] * (bs - 1)))
    pos_ctx, pos_blk = torch.arange(s), torch.arange(s, s + bs)
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        hn = rms(x, state[p + "input_layernorm.weight"])
        both = torch.cat([ctx, hn])
        q = rms((hn @ state[p + "self_attn.q_proj.weight"].T).view(bs, nh, hd), state[p + "self_attn.q_norm.weight"])
        k = rms((both @ state[p + "self_attn.k_proj.weight"].T).view(s + bs, nkv, hd),
                state[p + "self_attn.k_norm.weight"])
        v = (both @ state[p + "self_attn.v_proj.weight"].T).view(s + bs, nkv, hd)
        q, k = rope(q, pos_blk).transpose(0, 1), rope(k, torch.cat([pos_ctx, pos_blk])).transpose(0, 1)
        k, v = k.repeat_interleave(nh // nkv, 0), v.transpose(0, 1).repeat_interleave(nh // nkv, 0)
        att = ((q @ k.transpose(-1, -2)) / math.sqrt(hd)).softmax(-1)
        x = x + (att @ v).transpose(0, 1).reshape(bs, nh * hd) @ state[p + "self_attn.o_proj.weight"].T
        y = rms(x, state[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(y @ state[p + "mlp.gate_proj.weight"].T) * (y @ state[p + "mlp.up_proj.weight"].T)) \
            @ state[p + "mlp.down_proj.weight"].T
    return (rms(x, state["norm.weight"]) @ model.get_output_embeddings().weight.T)[1:]


def test_the_published_layout_computes_z_labs_forward(trained, tiny_model, tmp_path):
    from safetensors.torch import load_file

    from specbench_cli.methods.heads.checkpoint import load_heads

    src = write_zlab(tmp_path / "published", trained)
    cfg, state = json.loads((src / "config.json").read_text()), load_file(str(src / "model.safetensors"))
    head = load_heads(src, tiny_model)
    feats = torch.randn(7, len(TARGET_LAYERS) * cfg["hidden_size"], generator=torch.Generator().manual_seed(5))
    cache = head.new_cache()
    head.absorb(cache, feats[:4])
    head.absorb(cache, feats[4:])  # the cache grows step by step: the same as all at once
    with torch.no_grad():
        want = _reference_block_logits(state, cfg, tiny_model, feats, 9)
        torch.testing.assert_close(head.draft_logits(cache, 9), want, rtol=1e-4, atol=1e-4)
