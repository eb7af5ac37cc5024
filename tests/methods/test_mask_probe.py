"""Mask probing: mask embeddings (three initialisations), masks as input-only nodes under the
root, the best-first tree with top-1 expansion and repeat pruning, and the accepted-length
shift of the masks' guesses."""

from __future__ import annotations

import pytest
import torch
from helpers.tiny import VOCAB

from specbench_cli.decoding.decoder import DecodeState, VerifyResult
from specbench_cli.decoding.draft import Draft, depths
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.mask_probe import MaskProbe, best_first_tree, mask_steps

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


def make(model, budget: int, **opts) -> MaskProbe:
    return MaskProbe.create(MethodContext(target=model, tokenizer=None, budget=budget), **opts)


def state(ids, budget) -> DecodeState:
    return DecodeState(ids=list(ids), prompt_len=len(ids), budget=budget, remaining=100)


def result(draft: Draft, logits: torch.Tensor, accepted: list[int], bonus: int = 4) -> VerifyResult:
    return VerifyResult(draft, accepted, [draft.tokens[a] for a in accepted] + [bonus], logits, None,
                        logits.argmax(-1).tolist(), state(PROMPT, 30))


def table(model) -> torch.Tensor:
    return model.get_input_embeddings().weight.detach().float()


@pytest.mark.parametrize("m", [1, 2])
def test_budget_counts_the_masks_for_every_block_complexity(tiny_model, m):
    for budget in range(2, 65):
        method = make(tiny_model, budget, masks_per_step=m)
        method.reset(PROMPT)
        first = method.propose(state(PROMPT, budget))  # no candidates yet: masks only
        assert 1 + len(first) <= budget and len(first) >= 1 and not any(first.acceptable)
        # give it full candidate lists so the tree part is as large as allowed
        method.cands = [(list(range(10 + 8 * d, 18 + 8 * d)), [0.5 / (k + 1) for k in range(8)]) for d in range(6)]
        draft = method.propose(state(PROMPT, budget))
        draft.validate()
        assert 1 + len(draft) <= budget
        masks = [i for i, ok in enumerate(draft.acceptable) if not ok]
        if budget >= 1 + m + 1:
            assert len(masks) == m * method.steps >= m
            assert len(draft) == budget - 1  # the whole budget is used
    assert mask_steps(10, 1, None) == 3 and mask_steps(30, 1, None) == 6 and mask_steps(10, 2, None) == 2


def test_masks_are_input_only_chains_under_the_root_with_embeddings(tiny_model):
    method = make(tiny_model, 20, masks_per_step=2, init="gaussian")
    method.reset(PROMPT)
    draft = method.propose(state(PROMPT, 20))
    assert method.mask_nodes and len(method.mask_nodes) == 2
    d = depths(tuple(draft.parents))
    for chain in method.mask_nodes:
        assert [d[i] for i in chain] == list(range(1, method.steps + 1))
        assert draft.parents[chain[0]] == -1
        for i in chain:
            assert draft.acceptable[i] is False
            assert draft.embeds[i].shape == (tiny_model.config.hidden_size,)
    assert set(draft.embeds) == {i for c in method.mask_nodes for i in c}


def test_last_init_uses_the_last_prompt_tokens(tiny_model):
    method = make(tiny_model, 10, init="last", masks_per_step=2)  # S = 2 steps, 2 chains
    masks = method.init_masks(PROMPT)
    emb = table(tiny_model)
    assert masks.shape == (2, 2, tiny_model.config.hidden_size)
    torch.testing.assert_close(masks[0], emb[PROMPT[-2:]])     # chain 0: the most recent tokens
    torch.testing.assert_close(masks[1], emb[PROMPT[-4:-2]])   # chain 1: the ones before


def test_gaussian_init_matches_the_embedding_tables_statistics(tiny_model):
    method = make(tiny_model, 64, init="gaussian", masks_per_step=2)
    masks = method.init_masks(PROMPT)
    emb = table(tiny_model)
    z = (masks - emb.mean(0)) / emb.std(0)  # standardised per dimension
    assert masks.shape == (2, 6, emb.shape[1])
    assert abs(z.mean().item()) < 0.3 and 0.7 < z.std().item() < 1.3
    again = make(tiny_model, 64, init="gaussian", masks_per_step=2).init_masks(PROMPT)
    torch.testing.assert_close(masks, again)  # fixed seed
    other = make(tiny_model, 64, init="gaussian", masks_per_step=2, seed=1).init_masks(PROMPT)
    assert not torch.allclose(masks, other)


def test_mean_init_is_the_prompt_mean_updated_by_an_ema_of_accepted_tokens(tiny_model):
    method = make(tiny_model, 10, init="mean", ema=0.25)
    method.reset(PROMPT)
    emb = table(tiny_model)
    torch.testing.assert_close(method.masks[0, 0].float(), emb[PROMPT].mean(0))
    draft = method.propose(state(PROMPT, 10))
    logits = torch.zeros(len(draft) + 1, VOCAB)
    method.observe(result(draft, logits, accepted=[], bonus=40))
    expect = 0.75 * emb[PROMPT].mean(0) + 0.25 * emb[40]
    torch.testing.assert_close(method.masks[0, -1].float(), expect)


def brute_force_best(cands, root, n, width):
    """All nodes of the full candidate tree with pruning, by cumulative probability."""
    nodes = []

    def walk(path_toks, p, parent_tok, d):
        if d == len(cands):
            return
        kids = [(t, q) for t, q in zip(*cands[d]) if t != parent_tok][:width]
        for t, q in kids:
            nodes.append((p * q, tuple(path_toks + [t])))
            walk(path_toks + [t], p * q, t, d + 1)

    walk([], 1.0, root, 0)
    return sorted(v for v, _ in nodes)[::-1][:n]


def test_best_first_tree_keeps_the_highest_cumulative_probability_nodes():
    cands = [([10, 11, 12, 13], [0.5, 0.2, 0.1, 0.05]),
             ([20, 21, 22, 23], [0.6, 0.3, 0.05, 0.01]),
             ([30, 31, 32, 33], [0.4, 0.4, 0.1, 0.05])]
    for n in (1, 3, 7, 12):
        tokens, parents = best_first_tree(cands, root_token=99, n=n, width=3)
        assert len(tokens) == n and all(p < i for i, p in enumerate(parents))
        cum = []
        for i, t in enumerate(tokens):
            p, node = 1.0, i
            chain = []
            while node >= 0:
                chain.append(tokens[node])
                node = parents[node]
            for depth, tok in enumerate(reversed(chain)):
                p *= dict(zip(*cands[depth]))[tok]
            cum.append(p)
        assert sorted(cum)[::-1] == pytest.approx(brute_force_best(cands, 99, n, 3))


def test_pruning_replaces_a_child_repeating_its_parent_or_the_last_token():
    cands = [([7, 10, 11], [0.6, 0.3, 0.1]),   # 7 repeats the root
             ([10, 20, 21], [0.7, 0.2, 0.1])]  # 10 repeats its parent 10
    tokens, parents = best_first_tree(cands, root_token=7, n=6, width=2)
    kids_of_root = [t for t, p in zip(tokens, parents) if p == -1]
    assert kids_of_root == [10, 11]            # 7 pruned, next best 11 takes its place
    under_10 = [t for t, p in zip(tokens, parents) if p == tokens.index(10)]
    assert 10 not in under_10 and under_10[0] == 20
    # without pruning the repeats stay
    tokens, parents = best_first_tree(cands, root_token=7, n=2, width=2, prune=False)
    assert tokens == [7, 10] and parents == [-1, 0]


def test_pruning_is_off_while_the_text_itself_repeats(tiny_model):
    method = make(tiny_model, 10)
    method.reset(PROMPT)
    method.cands = [([14, 40], [0.9, 0.1])]
    draft = method.propose(state(PROMPT, 10))         # ids end 9, 14: 14 repeating the root is pruned
    assert 14 not in [t for t, ok in zip(draft.tokens, draft.acceptable) if ok]
    draft = method.propose(state(PROMPT + [14], 10))  # ids end 14, 14: the repeat is kept
    assert draft.tokens[0] == 14


def test_next_tree_reads_the_masks_shifted_by_the_accepted_length(tiny_model):
    method = make(tiny_model, 16, top_k=2, prune=False, masks_per_step=1)  # S = 5 masks, 10 tree nodes
    method.reset(PROMPT)
    method.cands = [([40, 41], [0.6, 0.4]), ([50, 51], [0.6, 0.4])]
    draft = method.propose(state(PROMPT, 16))
    chain = method.mask_nodes[0]
    logits = torch.zeros(len(draft) + 1, VOCAB)
    for j, node in enumerate(chain):
        logits[node + 1, 60 + j] = 20.0  # mask j guesses token 60 + j
    first = draft.tokens.index(40)
    method.observe(result(draft, logits, accepted=[first]))
    assert [c[0][0] for c in method.cands] == [61, 62, 63, 64]  # one accepted: depth 1 <- mask 2
    method.cands = [([40, 41], [0.6, 0.4]), ([50, 51], [0.6, 0.4])]
    draft = method.propose(state(PROMPT, 16))
    logits = torch.zeros(len(draft) + 1, VOCAB)
    for j, node in enumerate(method.mask_nodes[0]):
        logits[node + 1, 60 + j] = 20.0
    method.observe(result(draft, logits, accepted=[]))  # nothing accepted: depth 1 <- mask 1
    assert [c[0][0] for c in method.cands] == [60, 61, 62, 63, 64]


def test_bad_options_are_usage_errors(tiny_model):
    for opts in ({"init": "zeros"}, {"masks_per_step": 3}, {"ema": 2.0}):
        with pytest.raises(UsageError):
            make(tiny_model, 10, **opts)
    assert make(tiny_model, 10).params()["structure"] == "tree"
