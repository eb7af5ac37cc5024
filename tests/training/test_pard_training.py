"""`specbench train pard`: the expanded sequence gives every mask slot exactly the logits the
draft model computes at inference (text then masks), the conditional drop keeps whole chains in
the paper's shares, a few steps lower the PARD loss, an interrupted run resumed equals an
uninterrupted one, the mask token is recorded (and added when the vocabulary has no free row),
and bad options exit 2 before any model loads. Tiny random Llama; no download."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers.cli import cli
from helpers.tiny import VOCAB, WORDS, make_model, make_tokenizer, save_tiny

from specbench_cli.targets import as_target
from specbench_cli.training.common.loop import TrainConfig
from specbench_cli.training.draft_model.finetune import Example, build_examples
from specbench_cli.training.draft_model.pard import (
    PardRecipe,
    expand,
    kept_slots,
    mean_loss,
    pard_batch,
    prepare_mask_token,
    train_pard,
)

MASK = VOCAB - 1


def rows_for(n: int, length: int = 12) -> list[dict]:
    """Instruction/response rows over the tiny vocabulary, each response a short repeating
    pattern (learnable in a few steps)."""
    rows = []
    for i in range(n):
        cycle = [WORDS[(i + 3 * j) % len(WORDS)] for j in range(3)]
        rows.append({"instruction": f"write a poem about the {WORDS[i % len(WORDS)]}",
                     "response": " ".join(cycle[j % 3] for j in range(length)), "finished": True})
    return rows


def test_every_mask_slot_sees_what_the_drafter_sees_at_inference():
    model = make_model(0)
    ids = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33]
    ex = Example(ids, 3, len(ids) - 1)
    recipe = PardRecipe(k=4, retain=1.0, retain_min=1.0)
    slots = kept_slots(ex, recipe, torch.Generator().manual_seed(0))
    x, pos, tgt, allowed = expand(ex, MASK, slots)
    with torch.no_grad():
        packed = model(input_ids=torch.tensor([x]), position_ids=torch.tensor([pos]),
                       attention_mask=allowed[None, None]).logits[0]
        row = 0
        checked = 0
        for g, positions in enumerate(slots):
            for p in positions:
                context = ids[: p - g + 1] + [MASK] * g
                alone = model(input_ids=torch.tensor([context])).logits[0, -1]
                torch.testing.assert_close(packed[row], alone, rtol=1e-4, atol=1e-4)
                want = ids[p + 1] if ex.start <= p < ex.end else -100
                assert tgt[row] == want
                row += 1
                checked += g > 0
    assert len(slots) == 4 and checked > 10


def test_conditional_drop_keeps_whole_chains_in_the_papers_shares():
    ids = list(range(4, 4 + 60))
    ex = Example(ids, 5, len(ids) - 1)
    recipe = PardRecipe(k=8, retain=0.7, retain_min=0.2)
    slots = kept_slots(ex, recipe, torch.Generator().manual_seed(3))
    loss_slots = ex.end - ex.start
    assert slots[0] == list(range(len(ids)))
    for g in range(1, len(slots)):
        # a mask slot needs its predecessor in the chain kept, and a target (the last position has none)
        reachable = [p for p in range(g, len(ids) - 1) if p - 1 in set(slots[g - 1])]
        assert len(slots[g]) == min(len(reachable), int(loss_slots * max(0.7 ** g, 0.2) + 1e-9))
        assert set(slots[g]) <= set(reachable)
    assert [len(s) for s in slots[1:4]] == [37, 26, 18]  # 54 loss slots x 0.7, 0.49, 0.343
    # the draws depend on the generator only (a resumed run draws the same)
    assert kept_slots(ex, recipe, torch.Generator().manual_seed(3)) == slots
    assert kept_slots(ex, recipe, torch.Generator().manual_seed(4)) != slots
    # no drop: every slot with its chain in reach
    full = kept_slots(ex, PardRecipe(8, 1.0, 1.0), torch.Generator())
    assert sum(map(len, full)) > sum(map(len, slots))


def test_padding_in_a_batch_changes_no_slot():
    model = make_model(0)
    tok = make_tokenizer()
    examples = build_examples(rows_for(3), tok, model, 64)
    examples[1] = Example(examples[1].input_ids[:-4], examples[1].start, examples[1].end - 4)
    recipe = PardRecipe(k=3, retain=0.7, retain_min=0.3)
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(3)]  # noqa: E731
    with torch.no_grad():
        ids, pos, tgt, mask = pard_batch(examples, MASK, recipe, gens(), tok.pad_token_id)
        together = model(input_ids=ids, position_ids=pos, attention_mask=mask).logits
        for i, ex in enumerate(examples):
            one = pard_batch([ex], MASK, recipe, [gens()[i]], tok.pad_token_id)
            alone = model(input_ids=one[0], position_ids=one[1], attention_mask=one[3]).logits[0]
            torch.testing.assert_close(together[i, : alone.shape[0]], alone, rtol=1e-4, atol=1e-4)
            assert torch.equal(tgt[i, : alone.shape[0]], one[2][0])


def _train(out, steps=6, resume=False, recipe=None, lr=3e-3, save_every=3):
    model = make_model(0)
    tok = make_tokenizer()
    cfg = TrainConfig(steps=steps, batch_size=3, lr=lr, warmup=0, save_every=save_every, keep=2, seed=1)
    summary = train_pard(model, tok, rows_for(6), out, cfg, recipe or PardRecipe(k=4, retain=0.7, retain_min=0.3),
                         mask_id=MASK, max_len=64, resume=resume, progress=False)
    return model, summary


def test_a_few_steps_lower_the_pard_loss(tmp_path):
    tok = make_tokenizer()
    recipe = PardRecipe(k=4, retain=1.0, retain_min=1.0)
    examples = build_examples(rows_for(6), tok, make_model(0), 64)
    before = mean_loss(make_model(0), examples, MASK, recipe, tok.pad_token_id)
    model, summary = _train(tmp_path / "p", steps=25, recipe=recipe, save_every=25)
    after = mean_loss(model, examples, MASK, recipe, tok.pad_token_id)
    assert after < 0.8 * before, (before, after)
    config = json.loads((tmp_path / "p" / "config.json").read_text())
    assert config["pard_token"] == MASK and config["spd_type"] == "pard"


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    full, _ = _train(tmp_path / "full", steps=6)
    # as if interrupted after the step-3 checkpoint: only that one is left; resume to step 6
    shutil.rmtree(tmp_path / "full" / "checkpoints" / "step-0000006")
    resumed, summary = _train(tmp_path / "full", steps=6, resume=True)
    assert summary["resumed_from"] == 3
    a, b = full.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-6, atol=1e-7, msg=name)
    assert not torch.equal(a["model.embed_tokens.weight"], make_model(0).state_dict()["model.embed_tokens.weight"])


def test_the_mask_token_is_added_when_every_row_is_a_token():
    tok = make_tokenizer()
    model = make_model(0)
    assert prepare_mask_token(model, tok) == VOCAB  # every row is a token: one more row
    assert model.get_input_embeddings().weight.shape[0] == VOCAB + 1
    assert model.get_output_embeddings().weight.shape[0] == VOCAB + 1
    assert model.config.pard_token == VOCAB and model.config.spd_type == "pard"
    assert prepare_mask_token(model, tok) == VOCAB  # declared now: kept, nothing grows
    assert model.get_input_embeddings().weight.shape[0] == VOCAB + 1
    other = make_model(0)
    assert prepare_mask_token(other, tok, mask_id=7) == 7 and other.config.vocab_size == VOCAB


@pytest.mark.parametrize("args,message", [
    (["--k", "0"], "--k"),
    (["--retain", "0"], "--retain"),
    (["--retain-min", "1.5"], "--retain"),
    (["--mask-id", "-1"], "--mask-id"),
    (["--max-len", "4"], "--max-len"),
])
def test_bad_options_exit_2_before_loading(tmp_path, capsys, args, message):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows_for(2)))
    code, _, err = cli(["train", "pard", "--drafter", str(tmp_path / "nowhere"), "--data", str(data),
                        "-o", str(tmp_path / "out"), *args], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_cli_trains_a_pard_drafter_that_runs(tmp_path, capsys):
    """The command end to end: a drafter folder with a declared mask token that `pard` decodes with."""
    from helpers.tiny import EOS

    from specbench_cli import methods
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext

    src = save_tiny(tmp_path / "drafter", seed=0)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows_for(4)))
    out = tmp_path / "pard"
    code, _, err = cli(["train", "pard", "--drafter", str(src), "--data", str(data), "-o", str(out), "--k", "3",
                        "--steps", "2", "--batch-size", "2", "--save-every", "1", "--quiet", "--threads", "1"], capsys)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["pard_token"] == VOCAB and config["vocab_size"] == VOCAB + 1  # grown by the mask row
    target = make_model(0)
    ctx = MethodContext(target, make_tokenizer(), budget=4, draft_model=str(out))
    pard = methods.get("pard").create(ctx)
    ar = methods.get("ar").create(ctx)
    dec = Decoder(as_target(target), {EOS})
    prompt = [2, 5, 9, 14, 7]
    assert dec.generate(pard, prompt, 16, 4).output_ids == dec.generate(ar, prompt, 16, 4).output_ids
