"""`specbench train space`: the mask token added to tokenizer, embeddings and config; the masked
sequences (k masks at a drawn response position, gold labels shifted by one token past the next);
a few steps lower the mask loss; an interrupted run resumed gives the same final weights as an
uninterrupted one; bad options exit 2 before the model loads; the saved folder runs `space`."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers.cli import cli
from helpers.tiny import VOCAB, WORDS, make_model, make_tokenizer
from safetensors.torch import load_file

from specbench_cli.training.common.loop import TrainConfig
from specbench_cli.training.draft_model.finetune import build_examples
from specbench_cli.training.space.train import (
    SpaceConfig,
    add_mask_token,
    evaluate,
    mask_generator,
    masked_batch,
    train_space,
)


def rows_for(n: int, length: int = 14) -> list[dict]:
    rows = []
    for i in range(n):
        words = [WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(length)]
        rows.append({"id": f"r{i}", "instruction": f"write a poem about the {WORDS[i % len(WORDS)]} {i}",
                     "response": " ".join(words), "temperature": 0.0, "target": "tiny", "finished": i % 2 == 0})
    return rows


def test_mask_token_added_to_tokenizer_embeddings_and_config():
    model, tok = make_model(0), make_tokenizer()
    before = model.get_input_embeddings().weight.detach().clone()
    head = model.get_output_embeddings().weight.detach().clone()
    mask = add_mask_token(model, tok, 4)
    assert mask == VOCAB and tok.convert_ids_to_tokens(mask) == "[MASK]" and tok.mask_token_id == mask
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == VOCAB + 1 and model.config.vocab_size == VOCAB + 1
    assert torch.equal(emb[:VOCAB], before) and torch.allclose(emb[mask], before.mean(0))
    assert torch.allclose(model.get_output_embeddings().weight[mask], head.mean(0))
    assert model.config.space_mask_id == mask and model.config.space_mask_num == 4
    assert add_mask_token(model, tok, 4) == mask and emb.shape[0] == VOCAB + 1  # idempotent (resume)


def test_masked_sequences_put_k_masks_at_a_response_position_with_shifted_labels():
    model, tok = make_model(0), make_tokenizer()
    mask = add_mask_token(model, tok, 3)
    examples = build_examples(rows_for(8), tok, model, 64)
    k = 3
    ids, att, gold, loss, masked = masked_batch(examples, mask, tok.pad_token_id, SpaceConfig(k=k, mask_prob=1.0),
                                                mask_generator(0, 0))
    for i, e in enumerate(examples):
        row = ids[i].tolist()
        q = row.index(mask)
        assert e.start + 1 <= q <= e.end - k                   # inside the response, k gold tokens after it
        assert row[:q] == e.input_ids[:q] and row[q:q + k] == [mask] * k
        assert int(att[i].sum()) == q + k
        assert masked[i].nonzero().flatten().tolist() == list(range(q, q + k))
        assert loss[i].nonzero().flatten().tolist() == list(range(e.start, q + k))
        for t in range(e.start, q + k):                         # AR positions and mask j -> ids[q + j + 1]
            assert gold[i, t].item() == e.input_ids[t + 1]
    plain = masked_batch(examples, mask, tok.pad_token_id, SpaceConfig(k=k), mask_generator(0, 0), prob=0.0)
    assert not plain[4].any() and mask not in plain[0].tolist()[0]
    # the same (seed, step) draws the same placements; another step draws others
    again = masked_batch(examples, mask, tok.pad_token_id, SpaceConfig(k=k, mask_prob=1.0), mask_generator(0, 0))
    other = masked_batch(examples, mask, tok.pad_token_id, SpaceConfig(k=k, mask_prob=1.0), mask_generator(0, 1))
    assert torch.equal(again[0], ids) and not torch.equal(other[0], ids)


def test_mask_prob_mixes_plain_and_masked_samples():
    model, tok = make_model(0), make_tokenizer()
    mask = add_mask_token(model, tok, 2)
    examples = build_examples(rows_for(40), tok, model, 64)
    _, _, _, _, masked = masked_batch(examples, mask, tok.pad_token_id, SpaceConfig(k=2, mask_prob=0.5),
                                      mask_generator(0, 3))
    share = masked.any(1).float().mean().item()
    assert 0.2 < share < 0.8


def _train(out, steps=6, resume=False, space=None):
    torch.manual_seed(123)  # the loop seeds itself: a different global state must not matter
    model, tok = make_model(0), make_tokenizer()
    cfg = TrainConfig(steps=steps, batch_size=4, lr=3e-3, warmup=1, save_every=3, keep=2, seed=0)
    summary = train_space(model, tok, rows_for(24), out, cfg, space or SpaceConfig(k=3), max_len=64, holdout=0.0,
                          progress=False, resume=resume)
    hist = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    return model, summary, hist


def test_a_few_steps_lower_the_mask_loss(tmp_path):
    model, tok = make_model(0), make_tokenizer()
    space = SpaceConfig(k=3, mask_prob=1.0)
    mask = add_mask_token(model, tok, 3)
    examples = build_examples(rows_for(24), tok, model, 64)
    before = evaluate(model, examples, mask, tok.pad_token_id, space)
    cfg = TrainConfig(steps=20, batch_size=4, lr=3e-3, warmup=1, save_every=50, keep=1, seed=0)
    train_space(model, tok, rows_for(24), tmp_path / "m", cfg, space, max_len=64, holdout=0.0, progress=False)
    after = evaluate(model, examples, mask, tok.pad_token_id, space)
    assert after["mask_ce"] < before["mask_ce"] - 0.5 and after["ce"] < before["ce"]


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    _, _, full = _train(tmp_path / "full")
    assert any("mask_loss" in h for h in full) and any("mask_loss" not in h for h in full)  # mixed batches
    weights = load_file(tmp_path / "full" / "model.safetensors")
    # interrupted after the step-3 checkpoint: a fresh folder holding only that checkpoint
    (tmp_path / "cut" / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step-0000003", tmp_path / "cut" / "checkpoints" / "step-0000003")
    _, summary, resumed = _train(tmp_path / "cut", resume=True)
    assert summary["resumed_from"] == 3
    assert [h["loss"] for h in resumed] == pytest.approx([h["loss"] for h in full], rel=1e-5)
    again = load_file(tmp_path / "cut" / "model.safetensors")
    assert weights.keys() == again.keys()
    for name, tensor in weights.items():
        torch.testing.assert_close(again[name], tensor, rtol=1e-5, atol=1e-6)
    config = json.loads((tmp_path / "cut" / "config.json").read_text())
    assert config["space_mask_id"] == VOCAB and config["space_mask_num"] == 3 and config["vocab_size"] == VOCAB + 1


def test_resume_with_another_k_is_refused(tmp_path):
    from specbench_cli.errors import UsageError

    _train(tmp_path / "o", steps=3)
    with pytest.raises(UsageError, match="--resume: the checkpoint was trained with"):
        _train(tmp_path / "o", steps=6, resume=True, space=SpaceConfig(k=2))


def test_bad_options_exit_2_before_loading(tmp_path, capsys, monkeypatch):
    import specbench_cli.cli.train.common as tcli

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tcli, "load", no_load)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows_for(3)))
    base = ["train", "space", "--data", str(data), "-o", str(tmp_path / "o")]
    for extra, word in ((["--k", "0"], "--k"), (["--mask-prob", "0"], "--mask-prob"),
                        (["--mask-prob", "nan"], "--mask-prob"), (["--mask-loss-weight", "-1"], "--mask-loss-weight"),
                        (["--steps", "0"], "--steps"), (["--max-len", "9", "--k", "5"], "--max-len"),
                        (["--dtype", "int8"], "--dtype"), (["--device", "tpu"], "device")):
        code, _, err = cli(base + extra, capsys)
        assert code == 2, (extra, err)
        assert word in err and "Traceback" not in err and err.count("error:") == 1


def test_cli_trains_a_folder_that_runs_space(tmp_path, capsys, tiny_model_dir):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows_for(12)))
    out = tmp_path / "space-model"
    code, _, err = cli(["train", "space", "--data", str(data), "-o", str(out), "--target", str(tiny_model_dir),
                        "--k", "2", "--steps", "3", "--batch-size", "2", "--lr", "1e-3", "--warmup", "1",
                        "--max-len", "64", "--holdout", "0", "--threads", "1", "--quiet"], capsys)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["space_mask_id"] == VOCAB
    assert json.loads((out / "tokenizer_config.json").read_text()).get("mask_token") == "[MASK]"
    code, _, err = cli(["run", "--model", str(out), "--methods", "ar,space", "--limit", "1", "--categories", "qa",
                        "--max-new-tokens", "6", "--output-dir", str(tmp_path / "r"), "--threads", "1",
                        "--no-report"], capsys)
    assert code == 0, err
