"""EAGLE-3 training (`train heads --kind eagle3`): the training-time test equals what the head sees
at inference, the loss falls, resume is exact, the folder loads with d2t/t2d consistent, decoding
with the trained head equals AR with drafts accepted, and bad options exit 2 before any model loads."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args
from helpers.tiny import EOS
from helpers.tiny_eagle3 import LAYERS, tiny_eagle3_cache, train_tiny_eagle3

from specbench_cli.methods.heads.eagle3.training import build_eagle3, draft_vocabulary, ttt_unroll
from specbench_cli.targets import as_target
from specbench_cli.training.heads.eagle3 import eagle3_loss, make_eagle3_batch
from specbench_cli.training.heads.train import HeadsRecipe, train_heads

WORDS = ["sea", "sun", "dog", "cat", "red", "blue", "one", "two", "poem", "story"]


@pytest.fixture(scope="module")
def e3cache(tiny_model):
    return tiny_eagle3_cache(tiny_model)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model):
    out = tmp_path_factory.mktemp("e3") / "heads"
    train_tiny_eagle3(tiny_model, out, steps=60)
    return out


def _random_head(model, cache, n_vocab=48):
    head = build_eagle3(model, tuple(LAYERS), draft_vocabulary(cache, 128, n_vocab), seed=1)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return head.eval()


def test_ttt_unroll_equals_the_heads_inference_chain(tiny_model, e3cache):
    """Step k at position t = the head drafting a chain from t with its KV cache: step-0 keys of
    positions 0..t, then its own keys of steps 1..k (the diagonal), at RoPE positions t+k."""
    head = _random_head(tiny_model, e3cache)
    tokens, _, valid, _, layers, _ = make_eagle3_batch(e3cache, [0, 3])
    steps = 4
    with torch.no_grad():
        outs = ttt_unroll(head, layers, tokens, valid, steps)
    n = int(valid[1].sum())
    for t in (0, 3, n - steps - 2):
        cache = head.new_cache()
        out, _ = head.step(cache, layers[1, :t + 1], tokens[1, 1:t + 2], torch.arange(t + 1))
        prev = out[-1:]
        torch.testing.assert_close(prev[0], outs[0][1, t], rtol=1e-4, atol=1e-5)
        for k in range(1, steps):
            prev, _ = head.step(cache, prev, tokens[1, t + 1 + k:t + 2 + k], torch.tensor([t + k]))
            torch.testing.assert_close(prev[0], outs[k][1, t], rtol=1e-4, atol=1e-5)


def test_loss_masks_run_off_positions_and_tokens_outside_the_draft_vocabulary(tiny_model, e3cache):
    head = _random_head(tiny_model, e3cache, n_vocab=12)
    batch = make_eagle3_batch(e3cache, [0, 1, 2])
    weight = tiny_model.get_output_embeddings().weight[head.draft_ids].float()
    _, logs = eagle3_loss(head, batch, weight, steps=7)
    assert [k for k in logs if k.startswith("ce_h")] == [f"ce_h{k}" for k in range(7)]
    # a step whose every target position runs off the end contributes nothing
    short = tuple(x[:, :6] for x in batch)
    _, logs = eagle3_loss(head, short, weight, steps=7)
    assert "ce_h6" not in logs and "ce_h0" in logs


def test_draft_vocabulary_and_maps(tiny_model, e3cache):
    ids = draft_vocabulary(e3cache, 128, 16)
    resp = torch.cat([e3cache.tokens[int(e3cache.offsets[e]) + int(e3cache.starts[e]) + 1:int(e3cache.offsets[e + 1])]
                      for e in range(len(e3cache))])
    counts = torch.bincount(resp, minlength=128)
    assert ids.numel() == 16 and bool((ids[1:] > ids[:-1]).all())
    assert counts[ids].min() >= counts[[i for i in range(128) if i not in ids.tolist()]].max()
    default = draft_vocabulary(e3cache, 128, None)  # small data: the distinct response tokens
    assert default.numel() == int((counts > 0).sum())
    assert draft_vocabulary(e3cache, 128, 128).numel() == 128  # beyond them: prompt tokens, then ids


def test_training_lowers_the_loss_and_the_folder_loads(trained, tiny_model):
    from specbench_cli.methods.heads.checkpoint import inspect_heads, load_heads

    hist = json.loads((trained / "history.json").read_text())
    first = sum(h["loss"] for h in hist[:5]) / 5
    last = sum(h["loss"] for h in hist[-5:]) / 5
    assert last < 0.9 * first, (first, last)
    assert hist[-1]["top1_h0"] > hist[0]["top1_h0"] and "top1_h6" in hist[-1]
    kind, cfg = inspect_heads(trained)
    assert kind == "eagle3" and cfg["feature_layers"] == LAYERS and cfg["num_hidden_layers"] == 1
    head = load_heads(trained, tiny_model)
    n = cfg["draft_vocab_size"]
    assert head.d2t.shape == (n,) and head.t2d.shape == (128,) and int(head.t2d.sum()) == n
    ids = head.draft_ids
    assert bool((ids[1:] > ids[:-1]).all()) and bool(head.t2d[ids].all())
    summary = json.loads((trained / "training.json").read_text())
    assert summary["draft_vocab"] == n and summary["ttt_steps"] == 7 and (trained / "curves.png").is_file()


def test_resume_continues_exactly(tmp_path, tiny_model, e3cache):
    def recipe(steps):
        return HeadsRecipe(kind="eagle3", steps=steps, batch_size=3, lr=3e-3, warmup=2, save_every=3, holdout=0.2,
                           ttt_steps=3, draft_vocab=20, feature_layers=tuple(LAYERS))

    train_heads(tiny_model, e3cache, recipe(6), tmp_path / "a", {}, progress=False)
    train_heads(tiny_model, e3cache, recipe(3), tmp_path / "b", {}, progress=False)
    train_heads(tiny_model, e3cache, recipe(6), tmp_path / "b", {}, resume=True, progress=False)
    ha = json.loads((tmp_path / "a" / "history.json").read_text())
    hb = json.loads((tmp_path / "b" / "history.json").read_text())
    assert [h["step"] for h in hb] == list(range(1, 7))
    for x, y in zip(ha, hb):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-5)
    from specbench_cli.methods.heads.checkpoint import load_heads

    a, b = load_heads(tmp_path / "a").state_dict(), load_heads(tmp_path / "b").state_dict()
    for k, v in a.items():
        assert torch.equal(v, b[k]) if not v.is_floating_point() else torch.allclose(v, b[k], atol=1e-6), k


@pytest.mark.parametrize("budget", [4, 10])
def test_decoding_with_the_trained_head_equals_ar_and_accepts_drafts(budget, trained, tiny_model, tiny_tok):
    from specbench_cli import methods
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext

    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    ar, e3 = methods.get("ar").create(ctx), methods.get("eagle3").create(ctx, heads=str(trained))
    accepted = 0
    for prompt in ([2, 5, 9, 14, 7], [2, 40, 41, 42], [2, 90, 91, 92]):
        got = dec.generate(e3, prompt, 40, budget)
        assert got.output_ids == dec.generate(ar, prompt, 40, budget).output_ids
        accepted += sum(got.accept_lengths) - got.steps
    assert accepted > 0


def _data(tmp_path, model_dir):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"instruction": f"write a poem about the {w}",
                                        "response": " ".join(["the cat sat on mat", w] * 5), "finished": True,
                                        "target": str(model_dir)}) + "\n" for w in WORDS))
    return data


def test_cli_trains_and_the_folder_runs_as_eagle3_and_samd_fallback(tmp_path, capsys, tiny_model_dir):
    data = _data(tmp_path, tiny_model_dir)
    args = ["train", "heads", "--data", str(data), "--out", str(tmp_path / "h"), "--kind", "eagle3",
            "--feature-layers", "0,1,1", "--ttt-steps", "3", "--steps", "4", "--save-every", "2", "-q"]
    code, _, err = cli(args, capsys)
    assert code == 0, err
    meta = json.loads((tmp_path / "d.jsonl.eagle3-features" / "features.json").read_text())
    assert meta["kind"] == "eagle3" and meta["feature_layers"] == [0, 1, 1]
    heads = str(tmp_path / "h")
    for extra in (["--methods", "ar,eagle3", "--heads", heads],
                  ["--methods", "ar,samd", "-o", "samd.fallback=eagle3", "-o", f"samd.heads={heads}"]):
        out = tmp_path / f"runs-{extra[1]}"
        run = tiny_run_args(tiny_model_dir, out)
        run[run.index("--methods"):run.index("--methods") + 2] = extra[:2]
        run += extra[2:]
        code, _, err = cli(run, capsys)
        assert code == 0, err
        rows = run_rows(only_run_dir(out))
        by = {}
        for r in rows:
            by.setdefault(r["method"], {})[(r["question_id"], r["turn"])] = r["output_ids"]
        assert len(by) == 2 and by["ar"] == by[extra[1].split(",")[1]]
    # a plain (medusa/eagle/hydra) cache is refused for eagle3, one line, exit 2
    code, _, err = cli(["train", "heads", "--data", str(data), "--out", str(tmp_path / "m"), "--kind", "medusa",
                        "--steps", "1", "-q"], capsys)
    assert code == 0, err
    code, _, err = cli([*args[:3], str(tmp_path / "d.jsonl.features"), "--out", str(tmp_path / "h2"), *args[6:]],
                       capsys)
    assert code == 2 and "holds only the last hidden state" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("extra, message", [
    (["--ttt-steps", "0"], "--ttt-steps must be >= 1"),
    (["--draft-vocab", "0"], "--draft-vocab must be >= 1"),
    (["--feature-layers", "1,2"], "--feature-layers must be three layer indices"),
    (["--layers", "2"], "the EAGLE-3 head has one layer"),
    (["--adversarial"], "not eagle3"),
    ([], "the target has only 2 layers; pass --feature-layers"),
    (["--feature-layers", "0,1,5"], "--feature-layers 0,1,5: the target has 2 layers"),
])
def test_bad_options_exit_2_before_the_model_loads(extra, message, tmp_path, capsys, tiny_model_dir, monkeypatch):
    import specbench_cli.models.load

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad-input case")

    monkeypatch.setattr(specbench_cli.models.load, "load_model", refuse)
    data = _data(tmp_path, tiny_model_dir)
    code, _, err = cli(["train", "heads", "--data", str(data), "--out", str(tmp_path / "h"), "--kind", "eagle3",
                        "--target", str(tiny_model_dir), *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_autocast_trains_and_saves_a_float32_head(tmp_path, tiny_model, e3cache):
    from specbench_cli.methods.heads.checkpoint import load_heads

    recipe = HeadsRecipe(kind="eagle3", steps=3, batch_size=3, lr=3e-3, warmup=1, save_every=3, holdout=0.0,
                         ttt_steps=3, feature_layers=tuple(LAYERS), autocast=True)
    train_heads(tiny_model, e3cache, recipe, tmp_path / "h", {}, progress=False)
    hist = json.loads((tmp_path / "h" / "history.json").read_text())
    assert len(hist) == 3 and all(h["loss"] == h["loss"] and h["loss"] < 1e4 for h in hist)
    assert load_heads(tmp_path / "h").fc.weight.dtype == torch.float32
