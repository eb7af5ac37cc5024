"""Tests of specbench_cli.training.common.io: losses, subclone, training loop + resume, distill data, CLI.

Everything runs on a tiny randomly initialised Llama (hidden 32, 2 layers, vocab 128) and a
word-level tokenizer built here; no download. Tests needing the real SmolLM2 are marked slow.

(Over the usual ~350 lines: the drafter pipeline's six commands share one tiny model/tokenizer
fixture set and one synthetic distillation file; splitting would duplicate them or hide them in
conftest, away from the tests that explain them.)
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers.tiny import VOCAB, WORDS, make_tokenizer  # noqa: E402
from helpers.tiny import make_model as _make_model  # noqa: E402

from specbench_cli.errors import UsageError
from specbench_cli.training.common.loop import TrainConfig, train_loop
from specbench_cli.training.draft_model import losses
from specbench_cli.training.draft_model.finetune import (
    batch_indices,
    build_examples,
    collate,
    finetune,
    is_pretrain_step,
    next_token_loss,
    split_rows,
)
from specbench_cli.training.draft_model.subclone import subclone


def make_model(seed: int, layers: int = 2, dropout: float = 0.0):
    """The shared tiny Llama, tied (these tests were calibrated on the tied variant)."""
    return _make_model(seed, layers=layers, dropout=dropout, tie=True)


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory, tok):
    """A tiny target saved as an HF folder (loadable with load_model)."""
    d = tmp_path_factory.mktemp("target")
    make_model(0).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def rows_for(n: int, temps=(0.0, 1.0)):
    rows = []
    for i in range(n):
        for t in temps:
            words = [WORDS[(i * 7 + j * (3 + int(t * 5))) % len(WORDS)] for j in range(12)]
            rows.append({"id": f"s{i}", "instruction": f"write a poem about the {WORDS[i % len(WORDS)]} {i}",
                         "response": " ".join(words), "temperature": t, "top_p": 0.95, "target": "tiny",
                         "max_new_tokens": 16, "finished": i % 2 == 0})
    return rows


# ----------------------------------------------------------------------------- losses

P = torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.7, 0.1, 0.1, 0.1]])
Q = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.1, 0.6, 0.2, 0.1]])


def test_kld_matches_manual_formula():
    manual = [sum(p * math.log(p / q) for p, q in zip(pr.tolist(), qr.tolist())) for pr, qr in zip(P, Q)]
    got = losses.kld(P.log(), Q.log())
    assert got.item() == pytest.approx(sum(manual) / 2, rel=1e-5)
    # first row alone: 0.5 ln2 + 0 + 2 * 0.125 ln(0.5) = 0.25 ln 2
    assert losses.kld(P.log()[:1], Q.log()[:1]).item() == pytest.approx(0.25 * math.log(2), rel=1e-5)
    # direction: forward KL(p||q) differs from KL(q||p) here
    assert losses.kld(Q.log(), P.log()).item() != pytest.approx(got.item(), rel=1e-3)


def test_tvd_value_and_mask():
    # row 0: 0.5*(0.25+0+0.125+0.125)=0.25 ; row 1: 0.5*(0.6+0.5+0.1+0)=0.6
    assert losses.tvd(P.log(), Q.log()).item() == pytest.approx((0.25 + 0.6) / 2, rel=1e-5)
    logits_p = torch.stack([P.log(), P.log()])  # (2, 2, 4)
    logits_q = torch.stack([Q.log(), Q.log()])
    mask = torch.tensor([[True, False], [False, False]])
    assert losses.tvd(logits_p, logits_q, mask).item() == pytest.approx(0.25, rel=1e-5)
    assert losses.tvd(P.log(), P.log()).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("name", ["kld", "tvd", "tvd++"])
def test_gradient_step_reduces_divergence(name):
    torch.manual_seed(1)
    t = torch.randn(6, 10) * 2
    d = torch.randn(6, 10, requires_grad=True)
    before_tvd, before_kl = losses.tvd(t, d).item(), losses.kld(t, d).item()
    losses.distill_loss(name, t, d).backward()
    with torch.no_grad():
        d2 = d - 0.05 * d.grad
    assert losses.tvd(t, d2).item() < before_tvd
    if name == "kld":
        assert losses.kld(t, d2).item() < before_kl


def test_no_gradient_into_target():
    t = torch.randn(3, 5, requires_grad=True)
    d = torch.randn(3, 5, requires_grad=True)
    for name in losses.LOSSES:
        losses.distill_loss(name, t, d).backward()
    assert t.grad is None and d.grad is not None


def test_tvdpp_reward_normalised_over_batch_and_vocab():
    torch.manual_seed(2)
    p = F.softmax(torch.randn(5, 50), -1)
    q = F.softmax(torch.randn(5, 50), -1)
    r = losses.tvdpp_reward(p, q)
    assert r.shape == (5, 50)
    assert r.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert r.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    # it is the indicator p > q, affinely rescaled: higher exactly where p > q
    assert ((r > 0) == (p > q)).all()
    # normalisation is joint (one mean for all rows), not per row
    assert not torch.allclose(r.mean(-1), torch.zeros(5), atol=1e-3)


def test_tvdpp_gradient_has_sign_of_true_tvd_gradient():
    p = torch.tensor([[0.6, 0.3, 0.1]])
    dl = torch.tensor([[0.0, 0.0, 0.0]], requires_grad=True)  # q uniform: p>q on 0, p<q on 1, 2
    losses.tvd(p.log(), dl).backward()
    g_tvd = dl.grad.clone()
    dl.grad = None
    losses.tvdpp(p.log(), dl).backward()
    g_pp = dl.grad.clone()
    assert g_tvd[0, 0] < 0  # raising the logit of the token the drafter under-predicts lowers TVD
    assert torch.equal(torch.sign(g_pp), torch.sign(g_tvd))
    # with the exact vocabulary sum the mean baseline cancels: TVD++ grad = TVD grad / std(r)
    ratio = g_pp / g_tvd
    assert torch.allclose(ratio, ratio[0, 0].expand_as(ratio), rtol=1e-4)
    assert ratio[0, 0].item() == pytest.approx(1 / math.sqrt(2 / 9), rel=1e-3)  # r = (1,0,0): std = sqrt(2)/3


def test_loss_shape_errors():
    with pytest.raises(ValueError):
        losses.tvd(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError):
        losses.distill_loss("js", torch.zeros(2, 3), torch.zeros(2, 3))


# ----------------------------------------------------------------------------- subclone

def test_subclone_full_depth_reproduces_target():
    target = make_model(0, layers=3)
    x = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():
        assert torch.allclose(subclone(target, 3)(x).logits, target(x).logits, atol=1e-5)
        d = subclone(target, 2)
        # hidden state after the first layer is identical (the last entry has the final norm applied)
        h_t = target(x, output_hidden_states=True).hidden_states[1]
        h_d = d(x, output_hidden_states=True).hidden_states[1]
    assert torch.allclose(h_t, h_d, atol=1e-6)
    assert d.config.num_hidden_layers == 2 and d.config.vocab_size == VOCAB
    assert d.lm_head.weight.data_ptr() == d.model.embed_tokens.weight.data_ptr()  # still tied
    assert sum(p.numel() for p in d.parameters()) < sum(p.numel() for p in target.parameters())


def test_subclone_narrow_keeps_strongest_channels():
    target = make_model(0, layers=2)
    mlp = target.model.layers[0].mlp
    with torch.no_grad():
        for m in (mlp.gate_proj, mlp.up_proj):
            m.weight[7].mul_(100)  # channel 7 of layer 0 dominates
            m.weight[3].mul_(0)    # channel 3 of layer 0 is dead
    d = subclone(target, 2, narrow_ffn=0.5)
    assert d.config.intermediate_size == 32
    dm = d.model.layers[0].mlp
    assert dm.gate_proj.weight.shape == (32, 32) and dm.down_proj.weight.shape == (32, 32)
    rows = [int((target.model.layers[0].mlp.gate_proj.weight == r).all(-1).nonzero()[0])
            for r in dm.gate_proj.weight]
    assert 7 in rows and 3 not in rows and rows == sorted(rows)
    # gate/up/down stay paired on the same channels
    for j, r in enumerate(rows):
        assert torch.equal(dm.down_proj.weight[:, j], target.model.layers[0].mlp.down_proj.weight[:, r])
    x = torch.randint(0, VOCAB, (1, 5))
    assert d(x).logits.shape == (1, 5, VOCAB)


def test_subclone_bad_inputs():
    target = make_model(0)
    with pytest.raises(UsageError, match="between 1 and 2"):
        subclone(target, 3)
    with pytest.raises(UsageError, match="narrow-ffn"):
        subclone(target, 1, narrow_ffn=0)


def invoke(args):
    from typer.testing import CliRunner

    from specbench_cli.cli.train import train_app

    return CliRunner().invoke(train_app, ["drafter", *map(str, args)])


def test_subclone_cli_loads_with_load_model_and_shares_tokenizer(tmp_path, target_dir):
    from specbench_cli.models.load import load_model

    out = tmp_path / "sub"
    res = invoke(["subclone", "--target", target_dir, "--layers", 1, "--narrow-ffn", 0.5, "-o", out])
    assert res.exit_code == 0, res.output + repr(res.exception)
    lm = load_model(str(out))
    tgt = load_model(str(target_dir))
    assert lm.model.config.num_hidden_layers == 1 and lm.model.config.intermediate_size == 32
    assert lm.tokenizer.get_vocab() == tgt.tokenizer.get_vocab()
    assert lm.tokenizer.chat_template == tgt.tokenizer.chat_template
    x = torch.randint(0, VOCAB, (2, 6))
    with torch.no_grad():
        assert lm.model(x).logits.shape == tgt.model(x).logits.shape == (2, 6, VOCAB)
    meta = json.loads((out / "specbench_drafter.json").read_text())
    assert meta["kind"] == "subclone" and meta["layers"] == [0]
    # a second run into the same folder is refused, --force overwrites
    again = invoke(["subclone", "--target", target_dir, "--layers", 1, "-o", out])
    assert isinstance(again.exception, UsageError)
    assert invoke(["subclone", "--target", target_dir, "--layers", 1, "-o", out, "--force"]).exit_code == 0


# ----------------------------------------------------------------------------- data helpers

def test_examples_mark_response_positions(tok):
    target = make_model(0)
    rows = rows_for(2, temps=(0.0,))
    ex = build_examples(rows, tok, target, max_len=64)
    prompt = tok(tok.apply_chat_template([{"role": "user", "content": rows[0]["instruction"]}],
                                         add_generation_prompt=True, tokenize=False),
                 add_special_tokens=False)["input_ids"]
    resp = tok(rows[0]["response"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]  # finished
    assert ex[0].input_ids == prompt + resp
    ids, att, mask = collate(ex, tok.pad_token_id)
    # the masked positions predict exactly the response tokens
    assert ids[0, 1:][mask[0, :-1]].tolist() == resp
    assert att.sum().item() == sum(len(e.input_ids) for e in ex)
    # truncation to max_len
    short = build_examples(rows, tok, target, max_len=len(prompt) + 3)
    assert len(short[0].input_ids) == len(prompt) + 3 and short[0].end - short[0].start == 3


def test_split_and_schedule_helpers():
    rows = rows_for(40)
    train, held = split_rows(rows, 0.25)
    assert len(train) + len(held) == len(rows) and 0 < len(held) < len(rows)
    assert not {r["instruction"] for r in train} & {r["instruction"] for r in held}
    assert split_rows(rows, 0.25) == (train, held)
    assert sum(is_pretrain_step(s, 0.2) for s in range(100)) == 20
    assert not any(is_pretrain_step(s, 0.0) for s in range(50))
    # an epoch visits every item once; batches depend only on (seed, index)
    seen = sum((batch_indices(12, 4, i, 0) for i in range(3)), [])
    assert sorted(seen) == list(range(12))
    assert batch_indices(12, 4, 5, 0) == batch_indices(12, 4, 5, 0)
    assert len(batch_indices(3, 5, 0, 0)) == 5


# ----------------------------------------------------------------------------- training

def test_finetune_reduces_divergence_on_held_out(tmp_path, tok):
    target = make_model(0)
    drafter = make_model(1, layers=1)  # independent init: far from the target
    rows = rows_for(24)
    cfg = TrainConfig(steps=30, batch_size=8, lr=3e-3, warmup=2, save_every=15, keep=1)
    text = " ".join(WORDS * 40)
    summary = finetune(drafter, target, tok, rows, tmp_path / "ft", "kld", cfg, pretrain_text=text,
                       pretrain_mix=0.2, max_len=48, holdout=0.25, progress=False)
    hist = [json.loads(line) for line in (tmp_path / "ft" / "history.jsonl").read_text().splitlines()]
    distill = [h["kld"] for h in hist if "kld" in h]
    assert len(distill) == 24 and sum("pretrain_ce" in h for h in hist) == 6
    assert sum(distill[-5:]) / 5 < 0.7 * sum(distill[:5]) / 5  # training loss goes down
    assert summary["eval_after"]["kld"] < summary["eval_before"]["kld"]  # and on held-out instructions
    assert summary["eval_after"]["tvd"] < summary["eval_before"]["tvd"]
    assert (tmp_path / "ft" / "loss_curve.png").stat().st_size > 1000
    assert [p.name for p in (tmp_path / "ft" / "checkpoints").iterdir()] == ["step-0000030"]


def test_cached_target_logits_match_live_ones(tmp_path, tok):
    target = make_model(0)
    runs = []
    for cache in (False, True):
        drafter = make_model(1, layers=1)
        finetune(drafter, target, tok, rows_for(8), tmp_path / f"c{cache}", "tvd", TrainConfig(steps=3, batch_size=4),
                 max_len=48, holdout=0.0, progress=False, cache_target=cache)
        runs.append([json.loads(line)["tvd"] for line in (tmp_path / f"c{cache}" / "history.jsonl").open()])
    assert runs[0] == pytest.approx(runs[1], rel=1e-3)


def test_checkpoint_resume_continues_at_the_right_step(tmp_path, tok):
    ids = torch.randint(4, VOCAB, (16, 13), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(steps=6, batch_size=4, lr=1e-2, warmup=2, save_every=3, keep=2, seed=3)

    def run(out, stop_at=None):
        model = make_model(5, dropout=0.2)  # dropout: the resumed run must restore the RNG too
        called = []

        def step_fn(step):
            if step == stop_at:
                raise KeyboardInterrupt
            called.append(step)
            loss = next_token_loss(model, ids[batch_indices(16, 4, step, cfg.seed)])
            return loss, {"ce": loss.item()}

        model.train()
        try:
            train_loop(model, tok, out, cfg, step_fn, {}, resume=stop_at is None and (out / "checkpoints").exists(),
                       progress=False)
        except KeyboardInterrupt:
            pass
        return model, called

    straight, called = run(tmp_path / "a")
    assert called == list(range(6))
    _, called = run(tmp_path / "b", stop_at=4)  # dies during step 5: the last checkpoint is at step 3
    assert called == [0, 1, 2, 3]
    assert [p.name for p in (tmp_path / "b" / "checkpoints").iterdir()] == ["step-0000003"]
    resumed, called = run(tmp_path / "b")
    assert called == [3, 4, 5]
    for (n, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), n
    hist = [json.loads(line) for line in (tmp_path / "b" / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in hist] == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir()) == ["step-0000003", "step-0000006"]
    exported, called = run(tmp_path / "b")  # checkpoint already at the last step: exported, no step run
    assert called == [] and torch.equal(exported.lm_head.weight, resumed.lm_head.weight)
    with pytest.raises(UsageError, match="already has checkpoints"):
        train_loop(make_model(5), tok, tmp_path / "b", cfg, lambda s: None, {}, progress=False)
    with pytest.raises(UsageError, match="no checkpoint"):
        train_loop(make_model(5), tok, tmp_path / "c", cfg, lambda s: None, {}, resume=True, progress=False)


def _ce(model, ids):
    loss = next_token_loss(model, ids)
    return loss, {"ce": loss.item()}


def test_checkpoint_holds_no_pickle_and_state_round_trips(tmp_path, tok):
    import random

    import numpy as np

    from specbench_cli.training.common.state_io import JSON_FILE, TENSORS_FILE, load_state, save_state

    model = make_model(5)
    ids = torch.randint(4, VOCAB, (4, 9), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(steps=2, batch_size=4, lr=1e-2, warmup=1, save_every=2, keep=1, seed=0)
    train_loop(model, tok, tmp_path / "o", cfg, lambda s: _ce(model, ids), {}, progress=False)
    ck = tmp_path / "o" / "checkpoints" / "step-0000002"
    names = sorted(p.name for p in ck.iterdir())
    assert TENSORS_FILE in names and JSON_FILE in names
    assert not [n for n in names if n.endswith((".pt", ".bin", ".pkl", ".pickle"))]
    state = {"step": 7, "history": [{"step": 1, "loss": 0.5}], "scheduler": {"base_lrs": [0.1]},
             "optimizer": {"state": {0: {"exp_avg": torch.randn(3, 2), "step": torch.tensor(4.0)}},
                           "param_groups": [{"betas": (0.9, 0.95), "params": [0]}]},
             "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
             "odd": {"__tensor__": "not a tag"}}
    save_state(tmp_path, state)
    back = load_state(tmp_path)
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.95)
    assert torch.equal(back["optimizer"]["state"][0]["exp_avg"], state["optimizer"]["state"][0]["exp_avg"])
    assert back["rng"]["python"] == state["rng"]["python"] and torch.equal(back["rng"]["torch"], state["rng"]["torch"])
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(back["rng"]["numpy"], state["rng"]["numpy"]))
    assert back["odd"] == {"__tensor__": "not a tag"} and back["step"] == 7
    with pytest.raises(TypeError, match="without pickle"):
        save_state(tmp_path, {"f": lambda: 0})


class _Payload:
    """Unpickling this runs code: what a hostile trainer_state.pt would contain."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def test_resume_never_unpickles_code_from_a_checkpoint(tmp_path, tok):
    """An old-format checkpoint (trainer_state.pt) holding a code-running pickle is refused with
    a one-line UsageError, and the payload does not run."""
    ids = torch.randint(4, VOCAB, (4, 9), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(steps=2, batch_size=4, lr=1e-2, warmup=1, save_every=1, keep=1, seed=0)
    model = make_model(5)
    train_loop(model, tok, tmp_path / "o", cfg, lambda s: _ce(model, ids), {}, progress=False)
    ck = tmp_path / "o" / "checkpoints" / "step-0000002"
    for name in ("trainer_state.json", "trainer_state.safetensors"):
        (ck / name).unlink()
    marker = tmp_path / "pwned"
    torch.save({"step": 1, "evil": _Payload(marker)}, ck / "trainer_state.pt")
    with pytest.raises(UsageError, match="refusing .*trainer_state.pt") as e:
        train_loop(make_model(5), tok, tmp_path / "o", cfg, lambda s: None, {}, resume=True, progress=False)
    assert "\n" not in str(e.value) and not marker.exists()


def test_resume_reads_an_old_plain_pt_checkpoint(tmp_path, tok):
    """Checkpoints of earlier versions (trainer_state.pt of tensors, numbers and the numpy RNG
    key) still resume, through torch.load(weights_only=True)."""
    from specbench_cli.training.common.state_io import load_state

    ids = torch.randint(4, VOCAB, (4, 9), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(steps=3, batch_size=4, lr=1e-2, warmup=1, save_every=2, keep=1, seed=0)
    model = make_model(5)
    with pytest.raises(KeyboardInterrupt):
        train_loop(model, tok, tmp_path / "o", cfg,
                   lambda s: _ce(model, ids) if s < 2 else (_ for _ in ()).throw(KeyboardInterrupt()), {},
                   progress=False)
    ck = tmp_path / "o" / "checkpoints" / "step-0000002"
    torch.save(load_state(ck), ck / "trainer_state.pt")
    for name in ("trainer_state.json", "trainer_state.safetensors"):
        (ck / name).unlink()
    model = make_model(5)
    summary = train_loop(model, tok, tmp_path / "o", cfg, lambda s: _ce(model, ids), {}, resume=True, progress=False)
    assert summary["resumed_from"] == 2 and summary["steps_done"] == 3


def test_resume_refuses_a_mangled_trainer_state(tmp_path, tok):
    ids = torch.randint(4, VOCAB, (4, 9), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(steps=3, batch_size=4, lr=1e-2, warmup=1, save_every=1, keep=1, seed=0)
    model = make_model(5)
    train_loop(model, tok, tmp_path / "o", cfg, lambda s: _ce(model, ids), {}, progress=False)
    ck = tmp_path / "o" / "checkpoints" / "step-0000003"
    (ck / "trainer_state.json").write_text('{"format": 1, "state": {"step": "three"}}')
    with pytest.raises(UsageError, match="trainer state lacks"):
        train_loop(make_model(5), tok, tmp_path / "o", cfg, lambda s: None, {}, resume=True, progress=False)
    (ck / "trainer_state.safetensors").write_bytes(b"garbage")
    with pytest.raises(UsageError, match="cannot read the trainer state"):
        train_loop(make_model(5), tok, tmp_path / "o", cfg, lambda s: None, {}, resume=True, progress=False)


# ----------------------------------------------------------------------------- distillation data + CLI

def test_distill_data_generation(tmp_path, tok):
    from specbench_cli.training.draft_model.distill_data import generate_distill_data

    model = make_model(0)
    seeds = [{"id": f"q{i}", "category": "c", "instruction": f"write a poem about the {w}"}
             for i, w in enumerate(["cat", "dog", "sea"])]
    out = tmp_path / "d.jsonl"
    stats = generate_distill_data(model, tok, seeds, out, "tiny", temperatures=[0.0, 0.7], top_p=0.9,
                                  max_new_tokens=6, batch_size=2)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert stats == {"written": 6, "skipped": 0, "total": 6} and len(rows) == 6
    for r in rows:
        assert {"instruction", "response", "temperature", "top_p", "target", "max_new_tokens"} <= set(r)
        assert r["target"] == "tiny" and r["max_new_tokens"] == 6 and r["top_p"] == 0.9
        assert 0 <= r["response_tokens"] <= 6 and (r["finished"] or r["response_tokens"] == 6)
    assert sorted({r["temperature"] for r in rows}) == [0.0, 0.7]
    # greedy rows equal a manual greedy decode of the chat-templated prompt
    prompt = tok.apply_chat_template([{"role": "user", "content": seeds[1]["instruction"]}],
                                     add_generation_prompt=True, tokenize=False)
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    greedy = []
    with torch.no_grad():
        for _ in range(6):
            nxt = model(ids).logits[0, -1].argmax().item()
            if nxt == tok.eos_token_id:
                break
            greedy.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
    row = next(r for r in rows if r["id"] == "q1" and r["temperature"] == 0.0)
    assert row["response"] == tok.decode(greedy, skip_special_tokens=True)
    # re-running resumes: nothing new is written
    again = generate_distill_data(model, tok, seeds, out, "tiny", temperatures=[0.0, 0.7], top_p=0.9,
                                  max_new_tokens=6, batch_size=2)
    assert again == {"written": 0, "skipped": 6, "total": 6}
    assert len(out.read_text().splitlines()) == 6


def test_cli_pipeline_on_tiny_models(tmp_path, target_dir):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("\n".join(json.dumps({"id": f"s{i}", "instruction": f"write a short story about the {w}"})
                               for i, w in enumerate(WORDS[5:17])) + "\n")
    data = tmp_path / "d.jsonl"
    res = invoke(["distill-data", "--target", target_dir, "--seeds", seeds, "--temperatures", "0,1",
                  "--max-new-tokens", 8, "-o", data, "--quiet"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert len(data.read_text().splitlines()) == 24
    text = tmp_path / "pre.txt"
    text.write_text(" ".join(WORDS * 30))
    sub = tmp_path / "sub"
    assert invoke(["subclone", "--target", target_dir, "--layers", 1, "-o", sub]).exit_code == 0
    out = tmp_path / "ft"
    res = invoke(["finetune", "--drafter", sub, "--data", data, "--loss", "tvd++", "--pretrain-text", text,
                  "--steps", 4, "--batch-size", 4, "--save-every", 2, "--max-len", 40, "--pretrain-seq-len", 16, "-o", out,
                  "--quiet"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    summary = json.loads((out / "training.json").read_text())
    assert summary["loss"] == "tvd++" and summary["target"] == str(target_dir)  # target taken from the data
    assert {"eval_before", "eval_after"} <= set(summary) and summary["pretrain_mix"] == 0.2
    res = invoke(["finetune", "--drafter", sub, "--data", data, "--loss", "tvd++", "--pretrain-text", text,
                  "--steps", 6, "--batch-size", 4, "--save-every", 2, "--max-len", 40, "--pretrain-seq-len", 16, "-o", out,
                  "--quiet", "--resume"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    summary = json.loads((out / "training.json").read_text())
    assert summary["resumed_from"] == 4 and summary["steps_done"] == 6
    base = ["finetune", "--drafter", sub, "--data", data, "--loss", "kld", "--steps", 2, "--batch-size", 4,
            "--max-len", 40, "-o", out, "--quiet"]
    assert isinstance(invoke(base).exception, UsageError)  # folder already holds a model
    assert invoke(base + ["--force"]).exit_code == 0  # starts over: old checkpoints removed
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-0000002"]
    res = invoke(["evaluate", "--drafter", out, "--data", data, "--split", "all", "--json", tmp_path / "e.json"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    ev = json.loads((tmp_path / "e.json").read_text())
    assert ev["rows"] == 24 and 0 <= ev["top1"] <= 1 and ev["tokens"] > 0


@pytest.mark.parametrize("args, message", [
    (["finetune", "--drafter", "X", "--data", "MISSING.jsonl", "-o", "O"], "not found"),
    (["finetune", "--drafter", "X", "--data", "D", "-o", "O", "--loss", "tvdd"], "Did you mean 'tvd'"),
    (["distill-data", "-o", "O.jsonl", "--temperatures", "0,hot"], "comma-separated"),
    (["distill-data", "-o", "O.jsonl", "--seeds", "NOPE.jsonl"], "seed file not found"),
    (["finetune", "--drafter", "X", "--data", "D", "-o", "O", "--steps", "0"], "--steps"),
    (["evaluate", "--drafter", "X", "--data", "D", "--split", "test"], "unknown split"),
])
def test_bad_inputs_are_usage_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "D").write_text(json.dumps(rows_for(1)[0]) + "\n")
    res = invoke(args)
    assert isinstance(res.exception, UsageError), res.output + repr(res.exception)
    assert message in str(res.exception) and "\n" not in str(res.exception)


def test_pretrain_mix_needs_text(tmp_path, tok):
    target = make_model(0)
    with pytest.raises(UsageError, match="--pretrain-text"):
        finetune(subclone(target, 1), target, tok, rows_for(4), tmp_path / "x", "tvd", TrainConfig(steps=1),
                 pretrain_mix=0.2, progress=False)


def test_scratch_cli(tmp_path, target_dir):
    text = tmp_path / "t.txt"
    text.write_text(" ".join(WORDS * 20))
    out = tmp_path / "scratch"
    res = invoke(["scratch", "--text", text, "--tokenizer-from", target_dir, "--layers", 1, "--hidden", 16,
                  "--heads", 2, "--seq-len", 16, "--steps", 12, "--batch-size", 4, "--lr", 1e-2,
                  "--warmup", 1, "-o", out, "--quiet"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    hist = [json.loads(line)["pretrain_ce"] for line in (out / "history.jsonl").read_text().splitlines()]
    assert hist[-1] < hist[0]
    from specbench_cli.models.load import load_model

    lm = load_model(str(out))
    assert lm.model.config.vocab_size == VOCAB and lm.model.config.hidden_size == 16
    bad = invoke(["scratch", "--text", text, "--tokenizer-from", target_dir, "--hidden", 30, "--heads", 4,
                  "-o", tmp_path / "bad"])
    assert isinstance(bad.exception, UsageError)


# ----------------------------------------------------------------------------- real model (slow)

@pytest.mark.slow
def test_subclone_of_smollm2(tmp_path):
    from specbench_cli.models.load import load_model

    res = invoke(["subclone", "--layers", 2, "-o", tmp_path / "s"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    d = load_model(str(tmp_path / "s"))
    t = load_model("smollm2-135m")
    assert d.model.config.num_hidden_layers == 2 and d.model.config.vocab_size == t.model.config.vocab_size
    assert d.tokenizer.get_vocab() == t.tokenizer.get_vocab()
    ids = t.tokenizer("Hello there", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert d.model(ids).logits.shape == t.model(ids).logits.shape
