"""Published head checkpoints, built here in their exact published layouts (file names, pickles,
config quirks, key names, dtypes) from heads trained on the tiny target, then imported with
`specbench heads import`. For each layout: the import succeeds; the head's logits equal an
independent hand-written forward of the published architecture; decoding with the imported head
equals AR's greedy tokens at every BC with drafts accepted; a damaged copy exits 2."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.cli import cli
from helpers.tiny import EOS
from safetensors.torch import load_file

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.heads.checkpoint import load_heads
from specbench_cli.methods.heads.importers import import_heads
from specbench_cli.targets import as_target

PROMPTS = [[2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14], [2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 77]]


# -- the published layouts -----------------------------------------------------------------------

def eagle1_folder(tiny_heads, tiny_model, out: Path, dtype=torch.float32) -> Path:
    """SafeAILab's EAGLE-1/2 layout: a LlamaConfig `config.json` (no "specbench", `bias` absent as
    in `vicuna_7B_config.json`) and `pytorch_model.bin` = torch.save(state_dict) holding the
    target's `embed_tokens.weight` too."""
    src = Path(tiny_heads["eagle"])
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("specbench")
    cfg.pop("bias", None)
    cfg.update(torch_dtype=str(dtype).replace("torch.", ""), transformers_version="4.28.1")
    state = load_file(str(src / "model.safetensors"))
    state["embed_tokens.weight"] = tiny_model.get_input_embeddings().weight.detach().clone()
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(cfg))
    torch.save({k: v.to(dtype) for k, v in state.items()}, out / "pytorch_model.bin")
    return out


def medusa1_folder(tiny_heads, tiny_model, out: Path, dtype=torch.float32) -> Path:
    """FasterDecoding's Medusa-1 layout: `medusa_lm_head.pt` with `{i}.0.linear.*` and each head's
    own projection `{i}.1.weight` [V, h] (here the target's LM head, so drafts get accepted), and a
    `config.json` that lies about the head count (2) as the published one does."""
    src = Path(tiny_heads["medusa"])
    state = load_file(str(src / "medusa_lm_head.safetensors"))
    heads = 1 + max(int(k.split(".")[0]) for k in state)
    lm = tiny_model.get_output_embeddings().weight.detach()
    for i in range(heads):
        state[f"{i}.1.weight"] = (lm + 0.001 * i).clone()
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"medusa_num_heads": 2, "medusa_num_layers": 1,
                                                 "base_model_name_or_path": "lmsys/vicuna-7b-v1.3"}))
    torch.save({k: v.to(dtype) for k, v in state.items()}, out / "medusa_lm_head.pt")
    return out


# -- independent forwards of the published architectures -----------------------------------------

def rope(x, pos, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def eagle1_reference(state, cfg, embed, lm_head, features, tokens):
    """EAGLE-1 draft: x = fc(cat(embed(tok), feature)); one Llama layer without input norm
    (causal attention, RoPE, GQA), post-attention RMSNorm, SwiGLU MLP; no final norm; the
    target's LM head. features [n,h], tokens [n] at positions 0..n-1 -> logits [n,V]."""
    h, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, theta = h // nh, cfg["rms_norm_eps"], cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]
    W = {k: v.float() for k, v in state.items()}
    x = torch.cat([embed[tokens], features], -1) @ W["fc.weight"].T + W["fc.bias"]
    n = x.shape[0]
    pos = torch.arange(n)
    q = (x @ W["layers.0.self_attn.q_proj.weight"].T).view(n, nh, hd).transpose(0, 1)
    k = (x @ W["layers.0.self_attn.k_proj.weight"].T).view(n, nkv, hd).transpose(0, 1)
    v = (x @ W["layers.0.self_attn.v_proj.weight"].T).view(n, nkv, hd).transpose(0, 1)
    q, k = rope(q, pos, theta), rope(k, pos, theta)
    k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
    att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    att = att.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    x = x + (att @ v).transpose(0, 1).reshape(n, h) @ W["layers.0.self_attn.o_proj.weight"].T
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * W["layers.0.post_attention_layernorm.weight"]
    mlp = F.silu(y @ W["layers.0.mlp.gate_proj.weight"].T) * (y @ W["layers.0.mlp.up_proj.weight"].T)
    x = x + mlp @ W["layers.0.mlp.down_proj.weight"].T
    return x @ lm_head.T


def medusa1_reference(state, hidden):
    """Medusa-1 head i: W_i (x + SiLU(A_i x + b_i)) with its own vocabulary projection W_i."""
    heads = 1 + max(int(k.split(".")[0]) for k in state)
    out = []
    for i in range(heads):
        a, b, w = (state[f"{i}.0.linear.weight"].float(), state[f"{i}.0.linear.bias"].float(),
                   state[f"{i}.1.weight"].float())
        out.append((hidden + F.silu(hidden @ a.T + b)) @ w.T)
    return torch.stack(out, -2)


# -- tests ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def published(tiny_heads, tiny_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("published")
    return {"eagle": eagle1_folder(tiny_heads, tiny_model, d / "EAGLE-tiny"),
            "medusa": medusa1_folder(tiny_heads, tiny_model, d / "medusa-tiny")}


@pytest.fixture(scope="module")
def imported(published, tmp_path_factory):
    d = tmp_path_factory.mktemp("imported")
    return {kind: import_heads(src, d / kind) and d / kind for kind, src in published.items()}


def test_eagle1_import_drops_the_embedding_and_keeps_the_config(published, imported):
    cfg = json.loads((imported["eagle"] / "config.json").read_text())
    info = cfg["specbench"]["imported"]
    assert info["format"] == "EAGLE-1/2 (SafeAILab)" and info["dropped"] == ["embed_tokens.weight"]
    assert cfg["bias"] is True and cfg["num_hidden_layers"] == 1
    assert "embed_tokens.weight" not in load_file(str(imported["eagle"] / "model.safetensors"))


def test_eagle1_logits_equal_a_hand_written_forward(published, imported, tiny_model):
    state = torch.load(published["eagle"] / "pytorch_model.bin", weights_only=True)
    cfg = json.loads((published["eagle"] / "config.json").read_text())
    head = load_heads(imported["eagle"], tiny_model)
    torch.manual_seed(0)
    n = 7
    features, tokens = torch.randn(n, cfg["hidden_size"]), torch.randint(0, cfg["vocab_size"], (n,))
    _, got = head.step(head.new_cache(), features, tokens, torch.arange(n))
    embed = tiny_model.get_input_embeddings().weight.detach()
    want = eagle1_reference(state, cfg, embed, tiny_model.get_output_embeddings().weight.detach(), features, tokens)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_medusa1_import_trusts_the_tensors_over_the_config(imported):
    cfg = json.loads((imported["medusa"] / "config.json").read_text())
    assert cfg["medusa_num_heads"] == 3 and cfg["version"] == "1"
    assert cfg["specbench"]["imported"]["notes"] == ["config.json said medusa_num_heads 2; the file holds 3"]


def test_medusa1_logits_equal_a_hand_written_forward(published, imported, tiny_model):
    state = torch.load(published["medusa"] / "medusa_lm_head.pt", weights_only=True)
    head = load_heads(imported["medusa"], tiny_model)
    hidden = torch.randn(5, 32)
    torch.testing.assert_close(head.head_logits(hidden), medusa1_reference(state, hidden), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("budget", [1, 4, 10, 30, 60])
@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_imported_heads_decode_exactly_like_ar(kind, budget, imported, tiny_model, tiny_tok):
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    ar = methods.get("ar").create(ctx)
    method = methods.get(kind).create(ctx, heads=str(imported[kind]))
    accepted = 0
    for prompt in PROMPTS:
        ref, got = dec.generate(ar, prompt, 40, budget), dec.generate(method, prompt, 40, budget)
        assert got.output_ids == ref.output_ids
        accepted += sum(got.accept_lengths) - got.steps
    assert budget == 1 or accepted > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_checkpoints_import(dtype, tiny_heads, tiny_model, tmp_path):
    for kind, build in (("eagle", eagle1_folder), ("medusa", medusa1_folder)):
        src = build(tiny_heads, tiny_model, tmp_path / f"{kind}-src", dtype)
        summary = import_heads(src, tmp_path / kind)
        assert summary["dtypes"] == [str(dtype).replace("torch.", "")]
        load_heads(tmp_path / kind, tiny_model)


def damage(src: Path, dst: Path, how: str) -> Path:
    shutil.copytree(src, dst)
    weights = next(p for p in dst.iterdir() if p.name != "config.json")
    if how == "renamed":  # the pickle under a safetensors name
        weights.rename(weights.with_suffix(".safetensors"))
        if weights.name == "pytorch_model.bin":
            (dst / "pytorch_model.safetensors").rename(dst / "model.safetensors")
        return dst
    state = torch.load(weights, weights_only=True)
    key = sorted(state)[1]
    if how == "missing":
        state.pop("fc.weight" if "fc.weight" in state else "0.0.linear.weight")
    elif how == "shape":
        state[key] = torch.zeros(3, 3)
    elif how in ("nan", "inf"):  # one poisoned weight in an otherwise whole checkpoint
        name = "fc.weight" if "fc.weight" in state else "0.0.linear.weight"
        state[name] = state[name].clone()
        state[name].view(-1)[5] = float(how)
    elif how == "code":  # a pickle that would run code when loaded without weights_only
        import os

        class Evil:
            def __reduce__(self):
                return (os.system, ("echo pwned",))

        state = {**state, "evil": Evil()}
    torch.save(state, weights) if how != "code" else weights.write_bytes(__import__("pickle").dumps(state))
    return dst


@pytest.mark.parametrize("how, message", [("missing", "missing tensor"), ("shape", "has shape"),
                                          ("renamed", "is a PyTorch pickle, not safetensors"),
                                          ("code", "not a plain tensor checkpoint"),
                                          ("nan", r"tensor '(fc|0\.0\.linear)\.weight' holds NaN values"),
                                          ("inf", r"tensor '(fc|0\.0\.linear)\.weight' holds infinite values")])
@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_a_damaged_published_folder_is_one_line_exit_2(kind, how, message, published, tmp_path, capsys):
    src = damage(published[kind], tmp_path / "src", how)
    with pytest.raises(UsageError, match=message if not (how == "missing" and kind == "eagle") else "fc.weight"):
        import_heads(src, tmp_path / "out")
    code, _, err = cli(["heads", "import", str(src), "--out", str(tmp_path / "out2")], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err


def test_run_refuses_a_published_pickle_folder_and_names_the_import(published, capsys):
    code, _, err = cli(["run", "--methods", "eagle", "--heads", str(published["eagle"])], capsys)
    assert code == 2 and "specbench heads import" in err


def test_cli_import_then_run_help_line(published, tmp_path, capsys):
    code, _, err = cli(["heads", "import", str(published["medusa"]), "--out", str(tmp_path / "m")], capsys)
    assert code == 0 and "imported medusa heads" in err and "note: config.json said medusa_num_heads 2" in err
    code, _, err = cli(["heads", "import", str(published["medusa"]), "--out", str(tmp_path / "m")], capsys)
    assert code == 2 and "--force" in err


def test_an_absurd_vocabulary_size_is_refused_at_import(published, tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(published["eagle"], src)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "vocab_size": 10 ** 15}))
    code, _, err = cli(["heads", "import", str(src), "--out", str(tmp_path / "out")], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "'vocab_size' is 1000000000000000, more than any model has" in err
    assert str(src) in err and not (tmp_path / "out").exists()


def test_heads_with_nan_weights_are_refused_when_they_load(tiny_heads, tiny_model, tiny_model_dir, tmp_path, capsys):
    """Written by something else than `heads import` (which refuses them): `load_heads`, and so a
    run, refuses the folder naming the tensor instead of drafting from NaN logits."""
    from helpers.cli import tiny_run_args
    from safetensors.torch import save_file

    folder = tmp_path / "nan-heads"
    shutil.copytree(tiny_heads["eagle"], folder)
    state = load_file(str(folder / "model.safetensors"))
    state["fc.weight"] = state["fc.weight"].clone()
    state["fc.weight"][0, 0] = float("nan")
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg["specbench"].pop("target", None)  # made for this target under another name
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="tensor 'fc.weight' holds NaN values"):
        load_heads(folder, tiny_model)
    args = tiny_run_args(tiny_model_dir, tmp_path / "runs")
    args[args.index("ar,pld")] = "ar,eagle"
    code, _, err = cli([*args, "--heads", str(folder)], capsys)
    assert code == 2 and "model.safetensors: tensor 'fc.weight' holds NaN values" in err, err
