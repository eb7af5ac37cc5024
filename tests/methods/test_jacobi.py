"""Jacobi decoding: the window of guesses, its refresh from the verify pass, fills and budget."""

from __future__ import annotations

import pytest
import torch
from helpers.tiny import EOS, VOCAB

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder, DecodeState, VerifyResult
from specbench_cli.decoding.verify import verify_greedy
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.jacobi import Jacobi
from specbench_cli.targets import as_target

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6]


def make(budget, tok=None, **opts) -> Jacobi:
    return Jacobi.create(MethodContext(None, tok, budget=budget), **opts)


def state(ids, budget):
    return DecodeState(ids=list(ids), prompt_len=len(PROMPT), budget=budget, remaining=100)


def step(method: Jacobi, ids, budget, preds):
    """Propose, then verify against chosen target argmaxes `preds` (one per row), then observe."""
    st = state(ids, budget)
    draft = method.propose(st)
    assert len(preds) == len(draft) + 1
    logits = torch.full((len(preds), VOCAB), -1.0)
    logits[torch.arange(len(preds)), torch.tensor(preds)] = 1.0
    verdict = verify_greedy(draft, logits)
    assert verdict.preds == preds
    method.observe(VerifyResult(draft, verdict.accepted, verdict.new_tokens, logits, None, verdict.preds, st))
    return draft, verdict


def test_registered_and_described_as_a_chain():
    assert methods.get("jacobi") is Jacobi
    m = make(10)
    assert m.params() == {"structure": "chain", "window": 9, "init": "prompt"}
    assert m.label() == "jacobi"
    assert make(10, window=4).label() == "jacobi(window=4)"


@pytest.mark.parametrize("budget", range(1, 65))
def test_window_defaults_to_budget_minus_one_and_never_exceeds_it(budget):
    for opts in ({}, {"window": 5}, {"window": 100}):
        m = make(budget, **opts)
        m.reset(PROMPT)
        draft = m.propose(state(PROMPT + [11], budget))
        draft.validate()
        assert 1 + len(draft) <= budget
        expected = budget - 1 if "window" not in opts else min(opts["window"], budget - 1)
        assert len(draft) == expected
        assert draft.is_chain and draft.acceptable is None


def test_prompt_init_draws_guesses_from_the_prompt_reproducibly():
    a, b = make(10), make(10)
    a.reset(PROMPT)
    b.reset(PROMPT)
    ga = a.propose(state(PROMPT + [11], 10)).tokens
    assert ga == b.propose(state(PROMPT + [11], 10)).tokens
    assert set(ga) <= set(PROMPT)


def test_pad_and_ahead_init():
    pad = make(5, tok=type("T", (), {"pad_token_id": 1})(), init="pad")
    pad.reset(PROMPT)
    assert pad.propose(state(PROMPT + [11], 5)).tokens == [1, 1, 1, 1]
    ahead = make(5, init="ahead")
    ahead.reset(PROMPT)
    assert ahead.propose(state(PROMPT + [11], 5)).tokens == PROMPT[-4:]
    with pytest.raises(UsageError):
        make(5, init="noise")


def test_rejected_window_is_replaced_by_the_targets_predictions_after_each_guess():
    m = make(5, init="pad")
    m.reset(PROMPT)
    ids = PROMPT + [11]
    # guesses [0, 0, 0, 0] (pad = 0 without tokenizer); root predicts 20 != 0: nothing accepted
    draft, verdict = step(m, ids, 5, preds=[20, 21, 22, 23, 24])
    assert draft.tokens == [0, 0, 0, 0] and verdict.accepted == [] and verdict.new_tokens == [20]
    # new root 20 sits where guess 0 was; the next guesses are the predictions after guesses 0..3
    assert m.propose(state(ids + [20], 5)).tokens == [21, 22, 23, 24]


def test_accepted_prefix_shifts_the_window_and_fills_the_tail():
    m = make(5, init="pad")
    m.reset(PROMPT)
    ids = PROMPT + [11]
    step(m, ids, 5, preds=[20, 21, 22, 23, 24])
    ids = ids + [20]
    # guesses [21, 22, 23, 24]; the target agrees on 21, 22, then predicts 30 (bonus)
    draft, verdict = step(m, ids, 5, preds=[21, 22, 30, 31, 32])
    assert verdict.accepted == [0, 1] and verdict.new_tokens == [21, 22, 30]
    # rows after the bonus's row: predictions after guesses 23 and 24, then two pad fills
    assert m.propose(state(ids + [21, 22, 30], 5)).tokens == [31, 32, 0, 0]


def test_ahead_fill_copies_the_latest_known_tokens():
    m = make(4, init="ahead")
    m.reset(PROMPT)
    ids = PROMPT + [11]
    first = m.propose(state(ids, 4)).tokens
    step(m, ids, 4, preds=[first[0], first[1], 40, 41])  # two accepted, bonus 40
    # one prediction left (41), then two fills: the last two known tokens [40, 41]
    assert m.propose(state(ids + first[:2] + [40], 4)).tokens == [41, 40, 41]


def test_window_zero_proposes_nothing():
    m = make(10, window=0)
    m.reset(PROMPT)
    assert len(m.propose(state(PROMPT + [11], 10))) == 0


def test_sampling_results_without_preds_refresh_from_the_logits():
    m = make(3, init="pad")
    m.reset(PROMPT)
    st = state(PROMPT + [11], 3)
    draft = m.propose(st)
    logits = torch.zeros(3, VOCAB)
    logits[1, 50] = logits[2, 51] = 5.0
    m.observe(VerifyResult(draft, [], [7], logits, None, None, st))
    assert m.propose(state(PROMPT + [11, 7], 3)).tokens == [50, 51]


@pytest.mark.parametrize("init", ["prompt", "ahead", "pad"])
def test_equals_ar_on_the_tiny_model_for_every_init(init, tiny_model, tiny_tok):
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=6)
    ref = dec.generate(methods.get("ar").create(ctx), PROMPT, 24, 6)
    got = dec.generate(Jacobi.create(ctx, init=init), PROMPT, 24, 6)
    assert got.output_ids == ref.output_ids
    assert max(got.budget_used) <= 6
