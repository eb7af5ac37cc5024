"""Lookahead decoding: parameters from the block complexity, the window as a tree, the n-gram
pool (LRU, cap), verification n-grams as a trie, and the window's update after a step."""

from __future__ import annotations

import pytest
import torch
from helpers.tiny import EOS, VOCAB

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder, DecodeState, VerifyResult
from specbench_cli.decoding.draft import depths, path_to
from specbench_cli.decoding.verify import verify_greedy
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.lookahead import Lookahead, NgramPool, build_trie, default_config, step_cost, window_parents
from specbench_cli.targets import as_target

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6]


def make(budget, **opts) -> Lookahead:
    return Lookahead.create(MethodContext(None, None, budget=budget), **opts)


def state(ids, budget):
    return DecodeState(ids=list(ids), prompt_len=len(PROMPT), budget=budget, remaining=100)


def fake_result(draft, st, preds):
    logits = torch.full((len(preds), VOCAB), -1.0)
    logits[torch.arange(len(preds)), torch.tensor(preds)] = 1.0
    v = verify_greedy(draft, logits)
    return VerifyResult(draft, v.accepted, v.new_tokens, logits, None, v.preds, st)


# -- parameters from the block complexity ---------------------------------------------------------
@pytest.mark.parametrize("budget", range(2, 65))
def test_defaults_fit_the_budget(budget):
    w, n, g = default_config(budget)
    # the root is column 0 of level 0, so one forward costs (N-1)(W+G) tokens
    assert step_cost(w, n, g) == (n - 1) * (w + g) <= budget
    assert w * (n - 1) + g * (n - 1) <= budget
    assert w >= 1 and g >= 1 and n >= 2
    # nothing large is left unused: one more column would not fit
    assert (n - 1) * (w + g + 1) > budget


def test_default_table():
    assert default_config(1) == (0, 2, 0)
    assert default_config(2) == (1, 2, 1)       # empty window: pure pool verification
    assert default_config(4) == (2, 2, 2)
    assert default_config(10) == (3, 3, 2)
    assert default_config(30) == (5, 4, 5)
    assert default_config(60) == (8, 5, 7)


def test_params_and_options():
    m = make(30)
    p = m.params()
    assert p["structure"] == "tree" and (p["W"], p["N"], p["G"]) == (5, 4, 5) and p["tokens_per_step"] == 30
    assert m.label() == "lookahead"
    m = make(30, N=3)  # only N given: W and G re-split the budget for that N
    assert (m.W, m.N, m.G) == (8, 3, 7)
    assert make(30, G="3").G == 3
    with pytest.raises(UsageError):
        make(10, W=6, N=3)  # window alone needs 12 tokens
    with pytest.raises(UsageError):
        make(10, shift="two")
    with pytest.raises(UsageError):
        make(10, N=1)


# -- the lookahead window as a tree ---------------------------------------------------------------
def test_window_tree_attention_and_positions():
    w, n = 4, 4
    parents, index = window_parents(w, n)
    assert len(parents) == (n - 1) * w - 1 and index[0][0] == -1
    depth = depths(tuple(parents))
    cell = {node: (l, j) for l, row in enumerate(index) for j, node in enumerate(row) if node >= 0}
    for node, (l, j) in cell.items():
        # position: root + column + level
        assert depth[node] == j + l
        # sees: level-0 columns 1..j, then its own column at levels 1..l (itself included)
        seen = {cell[a] for a in path_to(parents, node)}
        assert seen == {(0, c) for c in range(1, j + 1)} | {(k, j) for k in range(1, l + 1)}


def test_window_tokens_are_never_acceptable_and_candidates_are():
    m = make(10)
    m.reset(PROMPT)
    draft = m.propose(state(PROMPT + [2], 10))  # 2 is followed by 5 and by 6 in the prompt
    draft.validate()
    nw = m.n_window
    assert nw == 5 and draft.acceptable[:nw] == [False] * nw
    assert all(draft.acceptable[nw:]) and len(draft) > nw
    # even a window token equal to the target's prediction is not accepted
    preds = [draft.tokens[0]] + [0] * len(draft)
    logits = torch.full((len(preds), VOCAB), -1.0)
    logits[torch.arange(len(preds)), torch.tensor(preds)] = 1.0
    assert verify_greedy(draft, logits).accepted == []


@pytest.mark.parametrize("budget", range(2, 65))
def test_budget_never_exceeded_with_a_full_pool(budget):
    m = make(budget, pool_cap=64, G=64 if budget % 2 else None)
    m.reset(PROMPT)
    for i in range(64):  # many distinct continuations of the root, some sharing prefixes
        m.pool.add(11, (i % 5, i, i + 1, i + 2)[: m.N - 1])
    draft = m.propose(state(PROMPT + [11], budget))
    draft.validate()
    assert 1 + len(draft) <= budget


# -- the n-gram pool --------------------------------------------------------------------------
def test_pool_caps_each_key_and_evicts_the_least_recently_used():
    pool = NgramPool(cap=3)
    for cont in [(1, 1), (2, 2), (3, 3)]:
        pool.add(7, cont)
    pool.add(7, (1, 1))           # re-inserting refreshes it
    pool.add(7, (4, 4))           # full: evicts the least recent, (2, 2)
    assert pool.recent(7, 10) == [(4, 4), (1, 1), (3, 3)]
    assert pool.recent(7, 2) == [(4, 4), (1, 1)]
    pool.add(8, (9, 9))           # keys are independent
    assert len(pool) == 4 and pool.recent(8, 5) == [(9, 9)] and pool.recent(99, 5) == []


def test_pool_is_seeded_with_the_prompt_and_follows_the_output():
    m = make(10)  # N = 3
    m.reset(PROMPT)
    assert m.pool.recent(2, 8) == [(5, 9)]          # (2, 6) ends the prompt: no 3-gram yet
    ids = PROMPT + [30, 2, 31]
    m.propose(state(ids, 10))                         # the output's n-grams become the most recent
    assert m.pool.recent(2, 8) == [(6, 30), (5, 9)]
    assert m.pool.recent(6, 8) == [(30, 2)] and m.pool.recent(30, 8) == [(2, 31)]
    off = make(10, pool_from_prompt=False, pool_from_output=False)
    off.reset(PROMPT)
    off.propose(state(ids, 10))
    assert len(off.pool) == 0


def test_candidates_match_the_root_and_are_verified_as_a_trie():
    m = make(10, W=1, G=4)  # N=3: window of one node, room for 8 candidate nodes
    m.reset([50])
    for cont in [(5, 6), (5, 7), (8, 9)]:
        m.pool.add(11, cont)
    m.pool.add(12, (40, 41))
    draft = m.propose(state([50, 11], 10))
    nw = m.n_window
    assert nw == 1
    # most recent first: (8, 9), (5, 7), (5, 6): the shared 5 is one node
    assert draft.tokens[nw:] == [8, 9, 5, 7, 6]
    assert draft.parents[nw:] == [-1, nw, -1, nw + 2, nw + 2]
    # the target says 5, 6, then 70: the branch (5, 6) is accepted whole
    preds = [0] * (len(draft) + 1)
    preds[0], preds[nw + 2 + 1], preds[nw + 4 + 1] = 5, 6, 70
    logits = torch.full((len(preds), VOCAB), -1.0)
    logits[torch.arange(len(preds)), torch.tensor(preds)] = 1.0
    assert verify_greedy(draft, logits).new_tokens == [5, 6, 70]


def test_trie_respects_room_and_truncates_the_last_candidate():
    tokens, parents = build_trie([(1, 2, 3), (1, 2, 4), (5, 6, 7)], room=5, base=10)
    assert tokens == [1, 2, 3, 4, 5] and parents == [-1, 10, 11, 11, -1]
    assert build_trie([(1, 2)], room=0, base=0) == ([], [])


# -- the window after a step ---------------------------------------------------------------
def test_step_collects_diagonal_ngrams_and_moves_the_window_one_iteration():
    m = make(60, W=3, N=4, G=0, pool_from_prompt=False, pool_from_output=False)
    m.reset(PROMPT)
    m.warmup = 0
    m.levels = [[0, 11, 12], [20, 21, 22], [30, 31, 32]]  # (level, column); (0, 0) is the root
    st = state(PROMPT + [99], 60)
    draft = m.propose(st)
    assert draft.tokens == [11, 12, 20, 21, 22, 30, 31, 32]
    preds = [50 + r for r in range(len(draft) + 1)]  # distinct predictions; row r+1 = node r
    preds[0] = 7                                      # root's prediction: the bonus
    top = [preds[m.index[2][j] + 1] for j in range(3)]
    m.observe(fake_result(draft, st, preds))
    # column j: key (0, j), then levels 1..N-2 of column j, then the prediction at the top
    assert m.pool.recent(99, 5) == [(20, 30, top[0])]
    assert m.pool.recent(11, 5) == [(21, 31, top[1])]
    assert m.pool.recent(12, 5) == [(22, 32, top[2])]
    # level l <- level l+1, level 0 drops its column 0 (the new root), top <- predictions
    assert m.levels == [[0, 21, 22], [30, 31, 32], top]


def test_shift_accepted_drops_overtaken_columns():
    m = make(60, W=4, N=3, G=4, shift="accepted", pool_from_prompt=False, pool_from_output=False)
    m.reset(PROMPT)
    m.levels = [[0, 11, 12, 13], [20, 21, 22, 23]]
    m.pool.add(99, (5, 6))
    st = state(PROMPT + [99], 60)
    draft = m.propose(st)
    nw = m.n_window
    preds = [0] * (len(draft) + 1)
    preds[0], preds[nw + 1] = 5, 6              # candidate (5, 6) accepted: two draft tokens
    result = fake_result(draft, st, preds)
    assert result.accepted == [nw, nw + 1]
    top = [preds[m.index[1][j] + 1] for j in range(4)]
    m.observe(result)
    # the root moved 3 positions: old level-1 column 3 is now level-0 column 1, the rest is fill
    assert m.levels[0][:2] == [0, 23] and m.levels[0][2] in PROMPT
    assert m.levels[1][:2] == top[2:] and set(m.levels[1][2:]) <= set(PROMPT)


def test_warmup_steps_add_no_trajectory_ngrams():
    m = make(60, W=3, N=4, G=0, pool_from_prompt=False, pool_from_output=False)
    m.reset(PROMPT)
    assert m.warmup == 2
    for i in range(2):
        st = state(PROMPT + [99 + i], 60)
        draft = m.propose(st)
        m.observe(fake_result(draft, st, [1] * (len(draft) + 1)))
    assert len(m.pool) == 0
    st = state(PROMPT + [101], 60)
    draft = m.propose(st)
    m.observe(fake_result(draft, st, [1] * (len(draft) + 1)))
    assert len(m.pool) > 0


# -- end to end on the tiny model -----------------------------------------------------------
@pytest.mark.parametrize("opts", [{}, {"shift": "accepted"}, {"W": 0}, {"N": 5, "W": 3, "G": 2}])
def test_equals_ar_and_only_accepts_candidates(opts, tiny_model, tiny_tok):
    budget = 20
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    method = Lookahead(ctx, **opts)
    seen = []
    observe = method.observe

    def spy(result):
        flags = result.draft.acceptable or [True] * len(result.draft)
        seen.extend(flags[a] for a in result.accepted)
        observe(result)

    method.observe = spy
    prompt = [2, 40, 41, 42, 40, 41, 42, 40, 41]
    ref = dec.generate(methods.get("ar").create(ctx), prompt, 32, budget)
    got = dec.generate(method, prompt, 32, budget)
    assert got.output_ids == ref.output_ids
    assert max(got.budget_used) <= budget
    assert all(seen)
