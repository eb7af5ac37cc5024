"""Token Recycling: the template, its truncation to the budget, the adjacency matrix's refresh
from the verified block, and the tree walked through it."""

from __future__ import annotations

import json

import pytest
import torch

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, VerifyResult
from specbench_cli.decoding.target import Target
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.recycling import TEMPLATE_CHILDREN, TokenRecycling, template_paths, truncate
from specbench_cli.targets import as_target


def test_the_template_has_the_papers_80_nodes_depth_6_and_8_root_children():
    paths = template_paths(TEMPLATE_CHILDREN)
    assert len(paths) == 80 and max(map(len, paths)) == 6
    assert sum(1 for p in paths if len(p) == 1) == 8
    assert all(len(p) == 1 or p[:-1] in set(paths) for p in paths)


@pytest.mark.parametrize("order", ["prior", "bfs"])
@pytest.mark.parametrize("n", [0, 1, 3, 9, 29, 59, 79, 200])
def test_truncation_keeps_parents_first_and_at_most_n(order, n):
    kept = truncate(template_paths(TEMPLATE_CHILDREN), n, order)
    assert len(kept) == min(n, 80)
    seen = set()
    for p in kept:
        assert len(p) == 1 or p[:-1] in seen
        seen.add(p)


def test_prior_order_goes_deeper_than_the_template_prefix_at_a_small_budget():
    paths = template_paths(TEMPLATE_CHILDREN)
    assert max(map(len, truncate(paths, 9, "bfs"))) == 2
    assert max(map(len, truncate(paths, 9, "prior"))) >= 4


def _method(budget=10, vocab=50, **options):
    class Logits(Target):  # a target of `vocab` logits per row, nothing else
        vocab_size = vocab
    m = TokenRecycling(MethodContext(budget=budget), **options)
    m.ctx = MethodContext(target=Logits(), budget=budget)
    m.reset([1, 2, 3])
    return m


def _verify(m, ids, draft, logits, new_tokens):
    """As the engine calls it: `ids` is its sequence, already extended by `new_tokens`."""
    state = DecodeState(ids=ids + new_tokens, prompt_len=1, budget=m.ctx.budget, remaining=100)
    m.observe(VerifyResult(draft=draft, accepted=[], new_tokens=new_tokens, logits=logits, hidden=None, preds=None,
                           state=state))


def test_verified_rows_refresh_their_tokens_and_the_tree_walks_them(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps([[0], [1], [0, 0]]))
    m = _method(budget=4, k=2, order="bfs", tree=str(tmp_path / "t.json"))
    vocab = 50
    logits = torch.zeros(3, vocab)
    logits[0, 7], logits[0, 8] = 5.0, 4.0      # after root token 3: 7 then 8
    logits[1, 9], logits[1, 10] = 5.0, 4.0     # after draft token 11: 9 then 10
    logits[2, 12], logits[2, 13] = 5.0, 4.0    # after draft token 12: 12 then 13
    _verify(m, [1, 2, 3], Draft(tokens=[11, 12], parents=[-1, 0]), logits, new_tokens=[7])
    assert m.matrix[3].tolist() == [7, 8] and m.matrix[11].tolist() == [9, 10] and m.matrix[12].tolist() == [12, 13]
    draft = m.propose(DecodeState(ids=[5, 3], prompt_len=1, budget=4, remaining=100))
    assert draft.tokens == [7, 8] and draft.parents == [-1, -1]  # row 7 unknown: node [0, 0] left out
    draft = m.propose(DecodeState(ids=[5, 11], prompt_len=1, budget=4, remaining=100))
    assert draft.tokens == [9, 10] and len(draft) <= 3


def test_through_the_engine_each_root_row_holds_its_successor(tiny_model, tiny_tok):
    """At BC 1 nothing is drafted and every step verifies only its root: the row of each output
    token (the last time it was a root) must rank first the token that followed it."""
    from helpers.tiny import EOS

    from specbench_cli.decoding.decoder import Decoder

    m = TokenRecycling.create(MethodContext(tiny_model, tiny_tok, budget=1))
    prompt = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31]
    out = Decoder(as_target(tiny_model), {EOS}).generate(m, prompt, 30, 1).output_ids
    seq = prompt + out
    last_next = {seq[i]: seq[i + 1] for i in range(len(prompt), len(seq) - 1)}  # the prefill is not observed
    assert last_next and all(int(m.matrix[t][0]) == n for t, n in last_next.items())


def test_hot_start_keeps_the_matrix_and_cold_start_clears_it():
    hot, cold = _method(hot=True), _method(hot=False)
    for m in (hot, cold):
        m.matrix[3] = torch.tensor([4] * 8, dtype=torch.int32)
        m.reset([9])
    assert hot.matrix[3, 0] == 4 and cold.matrix[3, 0] == -1


def test_a_tree_file_is_read_and_checked(tmp_path):
    good = tmp_path / "t.json"
    good.write_text(json.dumps([[0], [1], [0, 0], [0, 1]]))
    m = TokenRecycling(MethodContext(budget=10), tree=str(good))
    assert m.paths == [(0,), (1,), (0, 0), (0, 1)] and m.parent == [-1, -1, 0, 0]
    orphan = tmp_path / "o.json"
    orphan.write_text(json.dumps([[0], [1, 0]]))
    with pytest.raises(UsageError, match="has no parent"):
        TokenRecycling(MethodContext(budget=10), tree=str(orphan))
    with pytest.raises(UsageError, match="ranks 0..1"):  # the paper's template needs k >= 8
        TokenRecycling(MethodContext(budget=10), k=2)


@pytest.mark.parametrize("options, message", [({"k": 0}, "recycling.k"), ({"order": "best"}, "recycling.order"),
                                              ({"tree": "/no/such.json"}, "neither a known tree")])
def test_bad_options_are_usage_errors(options, message):
    with pytest.raises(UsageError, match=message):
        TokenRecycling(MethodContext(budget=10), **options)
