"""TR-Jacobi: template sized to the block complexity, retrieval path from prompt lookup, ahead
noise from the context, and next-step candidates from the last forward's unaccepted positions."""

from __future__ import annotations

import pytest
import torch

from specbench_cli.decoding.decoder import DecodeState, VerifyResult
from specbench_cli.decoding.draft import Draft, depths, paths_to_parents
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.tr_jacobi import RETRIEVAL, TRJacobi, jacobi_paths, rank_prior, template

V = 64


def make(budget: int, **opts) -> TRJacobi:
    return TRJacobi(MethodContext(target=None, tokenizer=None, budget=budget), **opts)


def state(ids: list[int], budget: int) -> DecodeState:
    return DecodeState(ids=list(ids), prompt_len=len(ids), budget=budget, remaining=100)


@pytest.mark.parametrize("budget", range(1, 65))
def test_template_fits_the_block_complexity_and_is_a_tree(budget):
    paths = template(budget)
    assert len(paths) == max(0, budget - 1)  # uses the whole budget
    keys = {tuple(p) for p in paths}
    assert len(keys) == len(paths)
    for p in paths:  # prefix-closed: every node's parent is in the template
        assert len(p) == 1 or tuple(p[:-1]) in keys
        assert all(c == RETRIEVAL for c in p) or all(c >= 0 for c in p)  # retrieval is its own branch
    method = make(budget)
    method.reset([5, 6, 7])
    draft = method.propose(state([5, 6, 7, 5, 6], budget)) if budget > 1 else Draft()
    draft.validate()
    assert 1 + len(draft) <= budget


def test_documented_templates_at_bc_10_30_60():
    bc10 = template(10)
    assert bc10 == [[-1], [-1, -1], [-1, -1, -1], [-1, -1, -1, -1], [0], [0, 0], [1], [0, 0, 0], [2]]
    for budget in (30, 60):
        paths = template(budget)
        assert sum(1 for p in paths if p[0] == RETRIEVAL) == 5
        assert max(len(p) for p in paths if p[0] != RETRIEVAL) <= 4
        assert max(p[-1] for p in paths) <= 9
    assert [0, 0, 0, 0] in template(30)


def test_jacobi_paths_are_the_highest_prior_nodes():
    paths = jacobi_paths(20, 10, 4)
    value = {p: torch.tensor([rank_prior(k) for k in p]).prod().item() for p in paths}
    worst_kept = min(value.values())
    # a few nodes outside the selection are all worth no more than the worst one kept
    for outside in [(0, 0, 0, 0, 0)[:4], (4,), (1, 1), (0, 3), (2, 0)]:
        if outside not in value:
            assert torch.tensor([rank_prior(k) for k in outside]).prod().item() <= worst_kept + 1e-12


def test_retrieval_path_is_filled_by_prompt_lookup():
    m = make(12)  # 5 retrieval nodes
    m.reset([1])
    ids = [1, 20, 21, 22, 23, 24, 25, 26, 27, 9, 9, 20, 21, 22]
    draft = m.propose(state(ids, 12))
    retrieval_nodes = [i for i, (d, c) in enumerate(m.slots) if c == RETRIEVAL]
    assert [draft.tokens[i] for i in retrieval_nodes] == [23, 24, 25, 26, 27]
    assert depths(tuple(draft.parents))[retrieval_nodes[-1]] == 5  # a chain below the root


def test_short_retrieval_and_empty_jacobi_rows_are_filled_with_context_noise():
    m = make(30, seed=3)
    ids = [10, 11, 12, 13, 10, 11]  # lookup of "10 11" -> [12, 13, 10, 11]: 4 of 5 retrieval slots
    m.reset(ids)
    draft = m.propose(state(ids, 30))
    retrieval_nodes = [i for i, (d, c) in enumerate(m.slots) if c == RETRIEVAL]
    assert [draft.tokens[i] for i in retrieval_nodes[:4]] == [12, 13, 10, 11]
    assert set(draft.tokens) <= set(ids)  # first step: no Jacobi output yet, all noise from the context
    other = make(30, seed=4)
    other.reset(ids)
    assert other.propose(state(ids, 30)).tokens != draft.tokens  # noise is sampled, seed-dependent


def fake_result(draft: Draft, logits: torch.Tensor, accepted: list[int]) -> VerifyResult:
    preds = logits.argmax(-1).tolist()
    return VerifyResult(draft, accepted, [draft.tokens[a] for a in accepted] + [0], logits, None, preds,
                        state([1], 30))


def test_next_candidates_come_from_the_unaccepted_continuation_of_the_accepted_path():
    m = make(10)  # template: R R R R | [0] [0,0] [1] [0,0,0] [2]
    ids = [1, 2, 3]
    m.reset(ids)
    node = {tuple(k): i for i, k in enumerate(paths_to_parents(m.paths)[1])}
    n = len(m.parents)
    draft = Draft(tokens=list(range(10, 10 + n)), parents=m.parents)  # distinct tokens
    logits = torch.zeros(n + 1, V)
    # root's children: [0] and [1] and [2] and R. Make [0] the child the target scores highest.
    for key, score in (((0,), 5.0), ((1,), 1.0), ((2,), 0.0), ((RETRIEVAL,), -1.0)):
        logits[0, draft.tokens[node[key]]] += score
    # distinct top tokens at the rows along [0] -> [0,0] -> [0,0,0]
    for key, tops in (((0,), [40, 41, 42]), ((0, 0), [50, 51, 52]), ((0, 0, 0), [60, 61, 62])):
        for r, t in enumerate(tops):
            logits[node[key] + 1, t] = 10.0 - r
    m.observe(fake_result(draft, logits, accepted=[]))
    assert [row[:3] for row in m.table] == [[40, 41, 42], [50, 51, 52], [60, 61, 62]]
    nxt = m.propose(state(ids + [7], 10))
    assert nxt.tokens[node[(0,)]] == 40 and nxt.tokens[node[(1,)]] == 41 and nxt.tokens[node[(2,)]] == 42
    assert nxt.tokens[node[(0, 0)]] == 50 and nxt.tokens[node[(0, 0, 0)]] == 60
    # after accepting [0], the continuation starts below it: rows [0,0], [0,0,0]
    m.observe(fake_result(draft, logits, accepted=[node[(0,)]]))
    assert [row[:3] for row in m.table] == [[50, 51, 52], [60, 61, 62]]
    # accepting a leaf leaves no unaccepted continuation: next step is noise + retrieval only
    m.observe(fake_result(draft, logits, accepted=[node[(0,)], node[(0, 0)], node[(0, 0, 0)]]))
    assert m.table == []


def test_budget_one_proposes_nothing_and_params_say_tree():
    assert len(make(1).propose(state([1, 2], 1))) == 0
    p = make(30).params()
    assert p["structure"] == "tree" and p["retrieval_len"] == 5 and p["tree_nodes"] == 29
