"""`specbench train sft|msn` (Make Some Noise): noise placement and content, equal-budget batches,
training, resume, export, the CLI's option checks, and the training prompts' independence from
Spec-Bench. Tiny random Llama (tests/helpers/tiny.py); no download."""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers.cli import cli as run_cli
from helpers.tiny import WORDS, make_model, make_tokenizer  # noqa: E402

from specbench_cli.training.common.loop import TrainConfig
from specbench_cli.training.draft_model.finetune import batch_indices, build_examples, collate
from specbench_cli.training.draft_model.synth_prompts import make_prompts
from specbench_cli.training.sft.noise import NoiseConfig, apply_noise, window
from specbench_cli.training.sft.train import noise_generator, train_sft


def rows_for(n: int, length: int = 14) -> list[dict]:
    """Deterministic instruction/response rows over the tiny vocabulary (distill-data format)."""
    rows = []
    for i in range(n):
        words = [WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(length)]
        rows.append({"id": f"r{i}", "instruction": f"write a poem about the {WORDS[i % len(WORDS)]} {i}",
                     "response": " ".join(words), "temperature": 0.0, "target": "tiny", "finished": i % 2 == 0})
    return rows


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def batch(tok):
    examples = build_examples(rows_for(6), tok, make_model(0), max_len=64)
    ids, att, mask = collate(examples, tok.pad_token_id)
    return examples, ids, att, mask


@pytest.mark.parametrize("kind", ["ahead", "random"])
@pytest.mark.parametrize("length", [1, 4, 8])
def test_noise_replaces_exactly_L_response_inputs(batch, kind, length):
    examples, ids, att, mask = batch
    noisy, nmask = apply_noise(ids, examples, NoiseConfig(length, kind), 128, torch.Generator().manual_seed(3))
    for b, e in enumerate(examples):
        where = nmask[b].nonzero().flatten().tolist()
        assert len(where) == length  # responses here have >= 14 tokens
        assert where == list(range(where[0], where[0] + length))  # one contiguous segment
        # inside the response inputs: after the prompt (>= P = start+1) and before the last token
        assert e.start + 1 <= where[0] and where[-1] <= e.end - 1
    assert torch.equal(noisy[~nmask], ids[~nmask])  # prompt, rest of the response, padding untouched
    assert (noisy[nmask] != ids[nmask]).any()  # and something was actually replaced
    assert (ids == batch[1]).all()  # the gold ids (the labels) are not modified in place


def test_window_clamps_to_short_response_and_skips_single_token():
    g = torch.Generator().manual_seed(0)
    assert window(9, 12, 8, g) == (10, 12)  # R = 3 -> 2 noisable inputs
    k, hi = window(9, 10, 4, g)  # R = 1: nothing to noise
    assert k == hi


def test_ahead_noise_draws_only_from_earlier_positions():
    # a sequence of distinct tokens: every token value identifies its position
    ids = torch.arange(40, 100).unsqueeze(0)  # (1, 60)

    class Ex:
        start, end = 19, 59

    for s in range(200):
        noisy, nmask = apply_noise(ids, [Ex], NoiseConfig(8, "ahead"), 128, torch.Generator().manual_seed(s))
        for pos in nmask[0].nonzero().flatten().tolist():
            src = int(noisy[0, pos]) - 40
            assert 0 <= src < pos


def test_loss_position_picks_lowest_loss_segment():
    ids = torch.arange(40, 70).unsqueeze(0)
    ce = torch.full((1, 30), 5.0)
    ce[0, 14:17] = 0.1  # tokens x_15..x_17 are easy (loss of x_i sits at i-1)

    class Ex:
        start, end = 9, 29

    _, nmask = apply_noise(ids, [Ex], NoiseConfig(3, "random", "loss"), 128, torch.Generator(), ce)
    assert nmask[0].nonzero().flatten().tolist() == [15, 16, 17]


def _cli(args, capsys):
    """Run `specbench ARGS` through the real entry point; return (exit code, stderr)."""
    code, _, err = run_cli(args, capsys)
    return code, err


def test_bad_options_exit_2_before_loading(tmp_path, capsys, monkeypatch):
    import specbench_cli.cli.train.common as tcli

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tcli, "load", no_load)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows_for(3)))
    base = ["train", "msn", "--data", str(data), "-o", str(tmp_path / "o")]
    for extra, word in ((["--noise", "ahaed"], "--noise"), (["--noise-length", "0"], "--noise-length"),
                        (["--noise-position", "ppl"], "--noise-position"), (["--dtype", "int8"], "--dtype"),
                        (["--steps", "0"], "--steps"), (["--max-len", "2"], "--max-len"),
                        (["--holdout", "1.5"], "--holdout"), (["--device", "tpu"], "device")):
        code, err = _cli(base + extra, capsys)
        assert code == 2, err
        assert word in err and "Traceback" not in err and err.count("error:") == 1
    code, err = _cli(["train", "sft", "--data", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o")], capsys)
    assert code == 2 and "nope.jsonl" in err


def _train(tmp_path, name, noise, steps=6, **kw):
    model, tok = make_model(0), make_tokenizer()
    cfg = TrainConfig(steps=steps, batch_size=4, lr=3e-3, warmup=1, save_every=3, keep=2, seed=0)
    summary = train_sft(model, tok, rows_for(24), tmp_path / name, cfg, noise, max_len=64, holdout=0.0,
                        progress=False, **kw)
    hist = [json.loads(line) for line in (tmp_path / name / "history.jsonl").read_text().splitlines()]
    return model, summary, hist


def test_sft_and_msn_see_the_same_batches_and_differ_only_by_noise(tmp_path, tok, monkeypatch):
    import specbench_cli.training.sft.train as sft

    seen = {"sft": [], "msn": []}
    real = sft.batch_loss

    def spy(model, ids, att, loss_mask, noise_mask=None, inputs=None):
        key = "sft" if noise_mask is None else "msn"
        seen[key].append((ids.clone(), loss_mask.clone(), None if inputs is None else inputs.clone(), noise_mask))
        return real(model, ids, att, loss_mask, noise_mask, inputs)

    monkeypatch.setattr(sft, "batch_loss", spy)
    _train(tmp_path, "sft", None, steps=3)
    _train(tmp_path, "msn", NoiseConfig(4), steps=3)
    assert len(seen["sft"]) == len(seen["msn"]) == 3
    for (ids_s, lm_s, _, _), (ids_m, lm_m, inp_m, nm) in zip(seen["sft"], seen["msn"]):
        assert torch.equal(ids_s, ids_m) and torch.equal(lm_s, lm_m)  # same gold batch and labels
        assert torch.equal(inp_m[~nm], ids_m[~nm]) and nm.sum() == 4 * ids_m.shape[0]


def test_loss_decreases_and_resume_is_identical(tmp_path):
    _, _, full = _train(tmp_path, "full", NoiseConfig(4))
    losses = [h["loss"] for h in full]
    assert sum(losses[-2:]) < sum(losses[:2])
    assert all("noise_loss" in h for h in full)
    # as if interrupted after the step-3 checkpoint: drop the step-6 one, resume to 6
    import shutil

    shutil.rmtree(tmp_path / "full" / "checkpoints" / "step-0000006")
    assert [p.name for p in (tmp_path / "full" / "checkpoints").iterdir()] == ["step-0000003"]
    _, summary, resumed = _train(tmp_path, "full", NoiseConfig(4), steps=6, resume=True)
    assert summary["resumed_from"] == 3
    assert [h["loss"] for h in resumed] == pytest.approx(losses, rel=1e-5)


def test_saved_folder_loads_and_generates(tmp_path):
    from specbench_cli.models.load import load_model

    _, summary, _ = _train(tmp_path, "out", None, steps=3)
    assert summary["kind"] == "sft" and summary["steps_done"] == 3
    assert (tmp_path / "out" / "loss_curve.png").stat().st_size > 0
    assert list((tmp_path / "out").glob("*.safetensors"))
    lm = load_model(str(tmp_path / "out"))
    ids = torch.tensor([lm.tokenizer("the cat sat", add_special_tokens=False)["input_ids"]])
    gen = lm.model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert gen.shape[1] == ids.shape[1] + 5


def test_noise_generator_depends_only_on_seed_and_step():
    a = torch.rand(3, generator=noise_generator(0, 5))
    assert torch.equal(a, torch.rand(3, generator=noise_generator(0, 5)))
    assert not torch.equal(a, torch.rand(3, generator=noise_generator(0, 6)))
    assert batch_indices(10, 4, 2, 0) == batch_indices(10, 4, 2, 0)


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def test_training_prompts_do_not_overlap_spec_bench():
    from specbench_cli.tasks.spec_bench import local_candidates
    from specbench_cli.training.draft_model.distill_data import load_seeds

    path = next((p for p in local_candidates() if p.is_file()), None)
    if path is None:
        pytest.skip("Spec-Bench question.jsonl not found (set SPECBENCH_QUESTIONS)")
    turns = {_norm(t) for line in path.read_text().splitlines() if line.strip()
             for t in json.loads(line)["turns"]}
    prompts = [p["instruction"] for p in make_prompts()] + [s["instruction"] for s in load_seeds()]
    assert len(prompts) > 400 and len(set(prompts)) == len(prompts)
    for p in map(_norm, prompts):
        assert p not in turns
        assert not any(len(p) > 30 and (p in t or t in p) for t in turns)


def test_bfloat16_autocast_trains_and_keeps_float32_weights(tmp_path):
    model, summary, hist = _train(tmp_path, "bf16", NoiseConfig(4, "random", "loss"), steps=3, autocast="bfloat16")
    assert summary["autocast"] == "bfloat16" and summary["noise"]["position"] == "loss"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert hist[-1]["loss"] < hist[0]["loss"]


# ----------------------------------------------------------------------------- LoRA (--lora-rank)

def test_lora_without_peft_exits_2_with_the_pip_command(tmp_path, capsys, monkeypatch):
    import sys

    import specbench_cli.cli.train.common as tcli

    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` now raises ImportError
    monkeypatch.setattr(tcli, "load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("model loaded")))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows_for(3)))
    for cmd in ("sft", "msn"):
        code, err = _cli(["train", cmd, "--data", str(data), "-o", str(tmp_path / "o"), "--lora-rank", "4"], capsys)
        assert code == 2 and "pip install" in err and "peft" in err and "Traceback" not in err
    code, err = _cli(["train", "sft", "--data", str(data), "-o", str(tmp_path / "o"), "--lora-rank", "0"], capsys)
    assert code == 2 and "--lora-rank" in err


def _lora_train(tmp_path, name, steps=4, resume=False):
    model, tok = make_model(0), make_tokenizer()
    cfg = TrainConfig(steps=steps, batch_size=4, lr=3e-2, warmup=1, save_every=2, keep=2, seed=0)
    summary = train_sft(model, tok, rows_for(24), tmp_path / name, cfg, NoiseConfig(4), max_len=64, holdout=0.0,
                        progress=False, resume=resume, lora_rank=4)
    hist = [json.loads(line) for line in (tmp_path / name / "history.jsonl").read_text().splitlines()]
    return model, summary, hist


def test_lora_trains_adapters_only_and_saves_a_merged_plain_folder(tmp_path):
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    from specbench_cli.models.load import load_model

    base = make_model(0)
    wrapped, summary, hist = _lora_train(tmp_path, "lora")
    assert summary["lora"]["rank"] == 4 and 0 < summary["lora"]["trainable_params"] < summary["lora"]["total_params"]
    assert hist[-1]["loss"] < hist[0]["loss"]
    # the frozen base weights did not move (train_sft injected the adapters into `wrapped` in place)
    inner = wrapped.state_dict()
    assert torch.equal(inner["model.layers.0.mlp.up_proj.base_layer.weight"], base.state_dict()["model.layers.0.mlp.up_proj.weight"])
    # the saved folder is a plain model (no adapter keys) that loads with load_model, and its
    # logits are the trained adapter model's (merge is right) and not the base model's
    weights = {k for f in (tmp_path / "lora").glob("model*.safetensors") for k in load_file(str(f))}
    assert weights and not any("lora" in k or "base_layer" in k for k in weights)
    lm = load_model(str(tmp_path / "lora"))
    ids = torch.tensor([[5, 9, 13, 21, 7, 30, 4]])
    with torch.no_grad():
        got, want, before = (m(input_ids=ids).logits for m in (lm.model, wrapped, base))
    assert torch.allclose(got, want, atol=1e-4)
    assert (got - before).abs().max() > 1e-2


def test_lora_resume_is_identical(tmp_path):
    pytest.importorskip("peft")
    import shutil

    _, _, full = _lora_train(tmp_path, "r")
    shutil.rmtree(tmp_path / "r" / "checkpoints" / "step-0000004")
    _, summary, resumed = _lora_train(tmp_path, "r", resume=True)
    assert summary["resumed_from"] == 2
    assert [h["loss"] for h in resumed] == pytest.approx([h["loss"] for h in full], rel=1e-5)


def test_msn_agreement_script_counts_common_prefixes(tmp_path):
    """results/reference/msn/msn_agreement.py: pairs AR rows by (question, turn, repeat); agreement is the
    common-prefix share of the longer output; non-AR / error rows and unpaired rows are not counted."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "msn_agreement", Path(__file__).resolve().parents[2] / "results" / "reference" / "msn" / "msn_agreement.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def run(name, outputs):
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"run_id": name, "config": {}, "model": {"name": name}}))
        rows = [{"method": m, "method_label": m, "status": st, "question_id": q, "turn": 0, "repeat": 0,
                 "category": c, "output_ids": ids, "new_tokens": len(ids), "wall_time": 1.0, "steps": len(ids),
                 "accept_lengths": [1] * len(ids)} for (m, st, q, c, ids) in outputs]
        (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return d

    a = run("a", [("ar", "ok", "1", "qa", [1, 2, 3, 4]), ("ar", "ok", "2", "rag", [5, 6]),
                  ("jacobi", "ok", "1", "qa", [9, 9, 9, 9]), ("ar", "ok", "3", "qa", [1])])
    b = run("b", [("ar", "ok", "1", "qa", [1, 2, 7, 4, 5]), ("ar", "ok", "2", "rag", [5, 6]),
                  ("ar", "error", "3", "qa", [1])])
    res = mod.agreement(mod.ar_outputs(a), mod.ar_outputs(b))
    overall = res["categories"]["overall"]
    assert overall["pairs"] == 2 and overall["identical"] == 1
    assert overall["token_agreement"] == pytest.approx((2 + 2) / (5 + 2), abs=1e-4)  # position 2 differs; later 4 == 4 not counted
    assert res["categories"]["qa"]["mean_common_prefix"] == 2 and res["unpaired"] == 1
    assert mod.main([str(a), str(tmp_path / "missing")]) == 2
