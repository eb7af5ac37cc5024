"""Hydra: heads trained here and the published layout (`zankner/Hydra`'s `hydra_lm_head.pt` +
HydraConfig), built here byte for byte in that layout from heads trained on the tiny target.
The import succeeds; head logits equal an independent hand-written forward of Hydra's
architecture; decoding equals AR's greedy tokens at every BC with drafts accepted; damaged
copies and foreign variants exit 2."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.cli import cli
from helpers.tiny import EOS, make_model
from safetensors.torch import load_file

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.heads.checkpoint import load_heads
from specbench_cli.methods.heads.draft_trees import hydra_tree
from specbench_cli.methods.heads.importers import import_heads
from specbench_cli.targets import as_target

PROMPTS = [[2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14], [2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 77]]


# -- the published layout ---------------------------------------------------------------------------

def published_hydra(heads_dir: str, model, out: Path, dtype=torch.float32, layers_said: int | None = None) -> Path:
    """`hydra_lm_head.pt` as HydraModel's trainer saves `hydra_head.state_dict()`, from heads trained
    here: prefix-mlp keys (Dropout at the even indices of each head's Sequential, the later blocks one
    repeated module, `hydra_lm_head.{i}.1.*` own LM heads = the target's + a bias), the prefix
    LlamaModel with its unused `embed_tokens` and transformers 4.36's `rotary_emb.inv_freq`."""
    src = Path(heads_dir)
    cfg = json.loads((src / "config.json").read_text())
    ours = load_file(str(src / "hydra_heads.safetensors"))
    heads, layers, arch = cfg["hydra_num_heads"], cfg["hydra_num_layers"], cfg["hydra_head_arch"]
    step = 2 if arch == "prefix-mlp" else 1
    lm = model.get_output_embeddings().weight.detach()
    state = {}
    for i in range(heads):
        first = step - 1
        for name in ("linear.weight", "linear.bias", "res_connection.weight", "res_connection.bias"):
            state[f"hydra_mlp.{i}.{first}.{name}"] = ours[f"first.{i}.{name}"]
        for n in range(1, layers):
            for name in ("weight", "bias"):  # one tensor under every index, as torch.save keeps a shared module
                state[f"hydra_mlp.{i}.{first + step * n}.linear.{name}"] = ours[f"shared.{i}.linear.{name}"]
        dotted = ".1" if arch == "prefix-mlp" else ""
        state[f"hydra_lm_head.{i}{dotted}.weight"] = lm.clone()
        state[f"hydra_lm_head.{i}{dotted}.bias"] = torch.zeros(lm.shape[0])
    if arch == "prefix-mlp":
        p = "prefix_embeding_layer."
        for k, v in ours.items():
            if k.startswith("prefix.layer."):
                state[p + "layers.0." + k[len("prefix.layer."):]] = v
        state[p + "norm.weight"] = ours["prefix.norm.weight"]
        state[p + "embed_tokens.weight"] = model.get_input_embeddings().weight.detach().clone()
        hd = model.config.hidden_size // model.config.num_attention_heads
        state[p + "layers.0.self_attn.rotary_emb.inv_freq"] = 1.0 / 10000 ** (torch.arange(0, hd, 2).float() / hd)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({
        "hydra_num_heads": heads, "hydra_num_layers": layers_said or layers, "hydra_head_arch": arch,
        "base_model_name_or_path": "lmsys/vicuna-7b-v1.3", "grounded_heads": True, "hidden_state_offset": 0,
        "transformers_version": "4.36.2"}))
    torch.save({k: v.to(dtype) for k, v in state.items()}, out / "hydra_lm_head.pt")
    return out


# -- an independent forward of Hydra's architecture -------------------------------------------------

def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x, pos, theta):
    d = x.shape[-1]
    ang = pos[:, None].float() / theta ** (torch.arange(0, d, 2).float() / d)[None]
    cos, sin = ang.cos().repeat(1, 2), ang.sin().repeat(1, 2)
    return x * cos + torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1) * sin


def hydra_reference(state, cfg, embed, features, path_tokens, head):
    """Hydra++ head `head` at the last of n positions: the prefix LlamaModel (input RMSNorm, causal
    GQA attention with RoPE, post-attention RMSNorm, SwiGLU MLP, final norm) over features [n, h];
    x = cat(prefix[-1], embed(path_tokens)); first block res(x) + SiLU(Ax + a); the repeated block
    applied hydra_num_layers - 1 times; own LM head with bias. Published key names throughout."""
    W = {k: v.float() for k, v in state.items()}
    p = "prefix_embeding_layer.layers.0."
    h, nh, nkv, eps = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rms_norm_eps
    hd, theta, n = h // nh, cfg.rope_parameters["rope_theta"], features.shape[0]
    pos = torch.arange(n)
    y = rms(features, W[p + "input_layernorm.weight"], eps)
    q = rotate((y @ W[p + "self_attn.q_proj.weight"].T).view(n, nh, hd).transpose(0, 1), pos, theta)
    k = rotate((y @ W[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd).transpose(0, 1), pos, theta)
    v = (y @ W[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd).transpose(0, 1)
    k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
    att = ((q @ k.transpose(-1, -2)) / math.sqrt(hd)).masked_fill(torch.ones(n, n).triu(1).bool(), -math.inf)
    x = features + (att.softmax(-1) @ v).transpose(0, 1).reshape(n, h) @ W[p + "self_attn.o_proj.weight"].T
    y = rms(x, W[p + "post_attention_layernorm.weight"], eps)
    x = x + (F.silu(y @ W[p + "mlp.gate_proj.weight"].T) * (y @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    base = rms(x, W["prefix_embeding_layer.norm.weight"], eps)[-1]
    z = torch.cat([base, embed[path_tokens].reshape(-1)])
    s = z @ W[f"hydra_mlp.{head}.1.res_connection.weight"].T + W[f"hydra_mlp.{head}.1.res_connection.bias"] \
        + F.silu(z @ W[f"hydra_mlp.{head}.1.linear.weight"].T + W[f"hydra_mlp.{head}.1.linear.bias"])
    j = 3
    while f"hydra_mlp.{head}.{j}.linear.weight" in W:
        s = s + F.silu(s @ W[f"hydra_mlp.{head}.{j}.linear.weight"].T + W[f"hydra_mlp.{head}.{j}.linear.bias"])
        j += 2
    return s @ W[f"hydra_lm_head.{head}.1.weight"].T + W[f"hydra_lm_head.{head}.1.bias"]


# -- fixtures -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def published(tiny_heads, tiny_model, tmp_path_factory):
    return published_hydra(tiny_heads["hydra"], tiny_model, tmp_path_factory.mktemp("pub") / "hydra-vicuna-tiny")


@pytest.fixture(scope="module")
def imported(published, tmp_path_factory):
    out = tmp_path_factory.mktemp("imp") / "hydra"
    import_heads(published, out)
    return out


# -- tests ------------------------------------------------------------------------------------------------

def test_import_keeps_the_layout_and_drops_what_hydra_never_uses(imported):
    cfg = json.loads((imported / "config.json").read_text())
    assert (cfg["hydra_num_heads"], cfg["hydra_num_layers"], cfg["hydra_head_arch"]) == (3, 2, "prefix-mlp")
    assert cfg["own_lm_heads"] and cfg["prefix"] == {"intermediate_size": 64}
    keys = set(load_file(str(imported / "hydra_heads.safetensors")))
    assert "shared.0.linear.weight" in keys and "lm_heads.2.bias" in keys and "prefix.norm.weight" in keys
    assert not any("embed_tokens" in k or "inv_freq" in k for k in keys)


@pytest.mark.parametrize("head", [0, 1, 2])
def test_logits_equal_a_hand_written_forward(head, published, imported, tiny_model):
    state = torch.load(published / "hydra_lm_head.pt", weights_only=True)
    hydra = load_heads(imported, tiny_model)
    torch.manual_seed(head)
    feats = torch.randn(7, tiny_model.config.hidden_size)
    path = torch.tensor([5, 9, 14][: head + 1])
    embed = tiny_model.get_input_embeddings().weight.detach().float()
    want = hydra_reference(state, tiny_model.config, embed, feats, path, head)
    base = hydra.base(hydra.new_cache(), feats, torch.arange(7))[-1:]
    got = hydra.head_logits(head, base, hydra.embed_tokens(path).reshape(1, -1))[0]
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()


def test_prefix_cache_fed_in_pieces_equals_one_pass(imported, tiny_model):
    hydra = load_heads(imported, tiny_model)
    feats = torch.randn(9, tiny_model.config.hidden_size)
    whole = hydra.base(hydra.new_cache(), feats, torch.arange(9))
    cache = hydra.new_cache()
    parts = [hydra.base(cache, feats[a:b], torch.arange(a, b)) for a, b in ((0, 4), (4, 5), (5, 9))]
    assert torch.allclose(torch.cat(parts), whole, atol=1e-5)


@pytest.mark.parametrize("budget", [1, 4, 10, 30, 60])
@pytest.mark.parametrize("which", ["trained", "imported"])
def test_decoding_equals_ar(which, budget, imported, tiny_heads, tiny_model, tiny_tok):
    folder = str(imported) if which == "imported" else tiny_heads["hydra"]
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    ar, hydra = methods.get("ar").create(ctx), methods.get("hydra").create(ctx, heads=folder)
    accepted = 0
    for prompt in PROMPTS:
        ref, got = dec.generate(ar, prompt, 40, budget), dec.generate(hydra, prompt, 40, budget)
        assert got.output_ids == ref.output_ids
        assert max(got.budget_used, default=1) <= budget
        accepted += sum(got.accept_lengths) - got.steps
    assert budget == 1 or accepted > 0


def test_the_tree_conditions_each_child_on_its_own_path(imported, tiny_model):
    """Two siblings' children come from different head calls (sequential dependence), each
    equal to the head's rank at that path; the tree follows the given paths, parents first."""
    hydra = load_heads(imported, tiny_model)
    base = torch.randn(tiny_model.config.hidden_size)
    paths = [[0], [1], [0, 0], [1, 0], [0, 1], [0, 0, 0]]
    tree = hydra_tree(hydra, base, 7, paths, budget=6)
    # order: depth, then parent, then rank: (0) (1) (0,0) (0,1) (1,0) (0,0,0)
    assert tree.parents == [-1, -1, 0, 0, 1, 2] and tree.depths == [1, 1, 2, 2, 2, 3]

    def top(i, toks, r):
        return int(hydra.head_logits(i, base[None], hydra.embed_tokens(torch.tensor(toks)).reshape(1, -1))[0]
                   .topk(r + 1).indices[r])
    t = tree.tokens
    assert t[0] == top(0, [7], 0) and t[1] == top(0, [7], 1)
    assert t[2] == top(1, [7, t[0]], 0) and t[3] == top(1, [7, t[0]], 1) and t[4] == top(1, [7, t[1]], 0)
    assert t[5] == top(2, [7, t[0], t[2]], 0)
    assert len(hydra_tree(hydra, base, 7, paths, budget=3).tokens) == 3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_checkpoints_import(dtype, tiny_heads, tiny_model, tmp_path):
    src = published_hydra(tiny_heads["hydra"], tiny_model, tmp_path / "src", dtype)
    assert import_heads(src, tmp_path / "out")["dtypes"] == [str(dtype).replace("torch.", "")]
    load_heads(tmp_path / "out", tiny_model)


def _rewrite(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    state = torch.load(dst / "hydra_lm_head.pt", weights_only=True)
    cfg = json.loads((dst / "config.json").read_text())
    edit(state, cfg)
    torch.save(state, dst / "hydra_lm_head.pt")
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _repeat_differs(state, cfg):
    for name in ("weight", "bias"):
        state[f"hydra_mlp.0.5.linear.{name}"] = state[f"hydra_mlp.0.3.linear.{name}"] + 1
        for i in (1, 2):
            state[f"hydra_mlp.{i}.5.linear.{name}"] = state[f"hydra_mlp.{i}.3.linear.{name}"]
    cfg["hydra_num_layers"] = 3


DAMAGE = {
    "missing": (lambda s, c: s.pop("hydra_lm_head.1.1.bias"), "missing tensor 'hydra_lm_head.1.1.bias'"),
    "shape": (lambda s, c: s.__setitem__("hydra_mlp.0.1.linear.weight", torch.zeros(3, 3)), "has shape"),
    "foreign key": (lambda s, c: s.__setitem__("medusa.0.weight", torch.zeros(2)), "not a Hydra key"),
    "repeat differs": (_repeat_differs, "Hydra repeats one block there"),
    "arch mismatch": (lambda s, c: c.__setitem__("hydra_head_arch", "mlp"), "says hydra_head_arch mlp"),
    "cross-attn": (lambda s, c: c.__setitem__("hydra_head_arch", "cross-attn"), "is not supported"),
    "offset": (lambda s, c: c.__setitem__("hidden_state_offset", 2), "hidden_state_offset 2"),
}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_published_folder_is_one_line_exit_2(how, published, tmp_path, capsys):
    edit, message = DAMAGE[how]
    src = _rewrite(published, tmp_path / "src", edit)
    with pytest.raises(UsageError, match=message):
        import_heads(src, tmp_path / "out")
    code, _, err = cli(["heads", "import", str(src), "--out", str(tmp_path / "out2")], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err


def test_a_pickle_named_safetensors_and_a_code_pickle_exit_2(published, tmp_path, capsys):
    renamed = shutil.copytree(published, tmp_path / "renamed")
    (renamed / "hydra_lm_head.pt").rename(renamed / "hydra_lm_head.safetensors")
    with pytest.raises(UsageError, match="PyTorch pickle, not safetensors"):
        import_heads(renamed, tmp_path / "o1")
    evil = shutil.copytree(published, tmp_path / "evil")
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    (evil / "hydra_lm_head.pt").write_bytes(pickle.dumps({"evil": Evil()}))
    with pytest.raises(UsageError, match="not a plain tensor checkpoint"):
        import_heads(evil, tmp_path / "o2")


def test_run_names_the_import_and_refuses_heads_for_another_target(published, imported, tmp_path, capsys):
    code, _, err = cli(["run", "--methods", "hydra", "--heads", str(published)], capsys)
    assert code == 2 and "specbench heads import" in err
    wide = make_model(0, hidden=48)
    with pytest.raises(UsageError, match="do not fit|another model"):
        methods.get("hydra").create(MethodContext(wide, None, budget=10), heads=str(imported))


def test_mlp_heads_import_too(tiny_model, tiny_tok, tmp_path):
    """Hydra's plain `mlp` heads (no prefix layer, no Dropout in the Sequential)."""
    from helpers.tiny_heads import self_distill_rows

    from specbench_cli.training.heads.data import build_feature_cache, load_feature_cache
    from specbench_cli.training.heads.train import HeadsRecipe, train_heads

    build_feature_cache(tiny_model, tiny_tok, self_distill_rows(tiny_model, tiny_tok), tmp_path / "f", batch_size=5,
                        meta={"target": "tiny"})
    recipe = HeadsRecipe(kind="hydra", heads_count=2, layers=1, arch="mlp", steps=40, batch_size=4, lr=1e-2,
                         warmup=2, save_every=40, holdout=0.0)
    train_heads(tiny_model, load_feature_cache(tmp_path / "f"), recipe, tmp_path / "mlp", {"target": "tiny"},
                progress=False)
    src = published_hydra(str(tmp_path / "mlp"), tiny_model, tmp_path / "pub")
    assert "hydra_lm_head.1.weight" in torch.load(src / "hydra_lm_head.pt", weights_only=True)
    assert import_heads(src, tmp_path / "imp")["arch"] == "mlp"
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=10)
    ar, hydra = methods.get("ar").create(ctx), methods.get("hydra").create(ctx, heads=str(tmp_path / "imp"))
    for prompt in PROMPTS:
        assert dec.generate(hydra, prompt, 32, 10).output_ids == dec.generate(ar, prompt, 32, 10).output_ids


def test_train_heads_cli_refuses_a_bad_hydra_arch_before_loading(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"instruction": "a", "response": "b", "target": "tiny"}\n')
    code, _, err = cli(["train", "heads", "--kind", "hydra", "--hydra-arch", "cross-attn", "--data", str(data),
                        "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "--hydra-arch" in err
