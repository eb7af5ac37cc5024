"""The shared engine: tree masks, KV cache rollback, verifier, decoding loop, budget."""

from __future__ import annotations

import random

import pytest
import torch
from helpers.tiny import EOS, VOCAB

from specbench_cli.decoding.decoder import BudgetExceeded, Decoder
from specbench_cli.decoding.draft import Draft, children_lists, depths, path_to, paths_to_parents, tree_inputs
from specbench_cli.decoding.verify import SamplingConfig, target_probs, verify_greedy
from specbench_cli.methods.ar import AutoRegressive
from specbench_cli.methods.core.method import Method, MethodContext
from specbench_cli.targets import as_target
from specbench_cli.targets.hf.kv import KVCache

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


def prefill(model, ids):
    cache = KVCache()
    out = model(input_ids=torch.tensor([ids]), past_key_values=cache.hf, use_cache=True)
    return cache, out.logits[0, -1]


def random_tree(rng: random.Random, n: int) -> list[int]:
    return [-1 if i == 0 else rng.randrange(-1, i) for i in range(n)]


@torch.inference_mode()
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_tree_forward_equals_each_path_run_as_its_own_chain(tiny_model, attn):
    tiny_model.set_attn_implementation(attn)
    rng = random.Random(0)
    parents = random_tree(rng, 12)
    tokens = [rng.randrange(4, VOCAB) for _ in parents]
    root = 11
    cache, _ = prefill(tiny_model, PROMPT)
    mask, pos = tree_inputs(parents, cache.length, torch.float32, "cpu")
    assert mask.shape == (1, 1, 13, len(PROMPT) + 13)
    tree_logits = tiny_model(input_ids=torch.tensor([[root] + tokens]), attention_mask=mask, position_ids=pos,
                             past_key_values=cache.hf, use_cache=True).logits[0]
    for node in range(len(parents)):
        chain = [root] + [tokens[i] for i in path_to(parents, node)]
        ref = tiny_model(input_ids=torch.tensor([PROMPT + chain])).logits[0, -1]
        torch.testing.assert_close(tree_logits[node + 1], ref, atol=1e-4, rtol=1e-4)
    tiny_model.set_attn_implementation("sdpa")


@torch.inference_mode()
def test_cache_compaction_equals_a_fresh_sequential_run(tiny_model):
    rng = random.Random(1)
    parents = [-1, -1, 0, 1, 3, 3, 4]
    tokens = [rng.randrange(4, VOCAB) for _ in parents]
    root, probe = 17, [40, 41]
    cache, _ = prefill(tiny_model, PROMPT)
    past = cache.length
    mask, pos = tree_inputs(parents, past, torch.float32, "cpu")
    tiny_model(input_ids=torch.tensor([[root] + tokens]), attention_mask=mask, position_ids=pos,
               past_key_values=cache.hf, use_cache=True)
    accepted = [1, 3, 4, 6]  # a path that is not a prefix of the node order: needs a gather, not a crop
    assert path_to(parents, 6) == accepted
    cache.keep(past, [0] + [a + 1 for a in accepted])
    assert cache.length == past + 1 + len(accepted)
    after = tiny_model(input_ids=torch.tensor([probe]), past_key_values=cache.hf, use_cache=True).logits[0]
    seq = PROMPT + [root] + [tokens[a] for a in accepted] + probe
    ref = tiny_model(input_ids=torch.tensor([seq])).logits[0, -len(probe):]
    torch.testing.assert_close(after, ref, atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_cache_crop_rolls_back_and_grows_past_its_initial_capacity(tiny_model):
    cache, _ = prefill(tiny_model, PROMPT)
    past = cache.length
    long = [4 + i % 100 for i in range(600)]  # beyond the 512-slot initial buffer
    tiny_model(input_ids=torch.tensor([long]), past_key_values=cache.hf, use_cache=True)
    assert cache.length == past + 600
    cache.crop_to(past)
    after = tiny_model(input_ids=torch.tensor([[50, 51]]), past_key_values=cache.hf, use_cache=True).logits[0]
    ref = tiny_model(input_ids=torch.tensor([PROMPT + [50, 51]])).logits[0, -2:]
    torch.testing.assert_close(after, ref, atol=1e-5, rtol=1e-5)


def test_tree_helpers():
    parents, keys = paths_to_parents([[0, 0], [0, 1], [1], [0]])
    assert keys == [(0,), (1,), (0, 0), (0, 1)]
    assert parents == [-1, -1, 0, 0]
    assert depths(tuple(parents)) == (1, 1, 2, 2)
    assert children_lists(parents) == [[0, 1], [2, 3], [], [], []]
    _, pos = tree_inputs(parents, 10, torch.float32, "cpu")
    assert pos.tolist() == [[10, 11, 11, 12, 12]]
    with pytest.raises(ValueError):
        Draft(tokens=[1, 2], parents=[-1, 1]).validate()


def _logits_preferring(rows: list[int]) -> torch.Tensor:
    logits = torch.zeros(len(rows), VOCAB)
    for r, t in enumerate(rows):
        logits[r, t] = 5.0
    return logits


def test_greedy_verifier_takes_longest_matching_path_and_bonus():
    # root -> a(10) -> b(11);  root -> c(20) -> d(21) -> e(22)
    draft = Draft(tokens=[10, 11, 20, 21, 22], parents=[-1, 0, -1, 2, 3])
    # target wants 20 after root, 21 after c, 99 after d
    logits = _logits_preferring([20, 0, 0, 21, 99, 0])
    v = verify_greedy(draft, logits)
    assert v.accepted == [2, 3]
    assert v.new_tokens == [20, 21, 99]
    assert v.rejected and v.path_length == 3  # d offered e (22) and the target refused it


def test_greedy_verifier_never_accepts_input_only_nodes():
    draft = Draft(tokens=[20, 21], parents=[-1, 0], acceptable=[False, True])
    v = verify_greedy(draft, _logits_preferring([20, 21, 22]))
    assert v.accepted == [] and v.new_tokens == [20]
    assert not v.rejected and v.path_length == 0  # an input-only node is no offer


def test_path_length_says_whether_the_draft_ran_out_or_was_refused():
    """Per-position acceptance needs it: a refusal counts against position k, running out does not."""
    tree = Draft(tokens=[10, 11, 20], parents=[-1, 0, -1])  # root -> a(10) -> b(11); root -> c(20)
    ran_out = verify_greedy(tree, _logits_preferring([20, 0, 0, 7]))  # c accepted, c has no child
    assert ran_out.accepted == [2] and not ran_out.rejected and ran_out.path_length == 1
    refused = verify_greedy(tree, _logits_preferring([10, 99, 0, 0]))  # a accepted, its child b refused
    assert refused.accepted == [0] and refused.rejected and refused.path_length == 2
    whole_chain = verify_greedy(Draft.chain([5, 6]), _logits_preferring([5, 6, 9]))
    assert whole_chain.path_length == 2 and not whole_chain.rejected
    assert verify_greedy(Draft(), _logits_preferring([4])).path_length == 0


def test_greedy_chain_stops_at_first_mismatch():
    draft = Draft.chain([5, 6, 7])
    v = verify_greedy(draft, _logits_preferring([5, 6, 9, 8]))
    assert v.accepted == [0, 1] and v.new_tokens == [5, 6, 9]


def test_top_p_keeps_the_smallest_prefix_reaching_the_mass():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = target_probs(logits, SamplingConfig(temperature=1.0, top_p=0.75))
    torch.testing.assert_close(p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))


class Oracle(Method):
    """Proposes the true greedy continuation (from a reference run), optionally inside a bushy tree."""

    name = "oracle"

    def __init__(self, ctx, reference: list[int], tree: bool = False):
        super().__init__(ctx)
        self.reference, self.tree, self.rng = reference, tree, random.Random(0)

    def reset(self, prompt_ids):
        self.prompt_len = len(prompt_ids)

    def propose(self, state):
        done = len(state.ids) - self.prompt_len
        truth = self.reference[done:done + state.budget - 1]
        if not self.tree:
            return Draft.chain(truth)
        tokens, parents, prev = [], [], -1
        for t in truth:  # a wrong sibling before each true node, until the budget is used
            if len(tokens) + 2 > state.budget - 1:
                break
            tokens += [(t + 1) % VOCAB, t]
            parents += [prev, prev]
            prev = len(tokens) - 1
        return Draft(tokens=tokens, parents=parents)


class Greedy(Method):
    name = "too-greedy"

    def propose(self, state):
        return Draft.chain([5] * state.budget)


@pytest.mark.parametrize("tree", [False, True])
def test_oracle_drafts_are_fully_accepted_and_output_is_unchanged(tiny_model, tiny_tok, tree):
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=7)
    ar = dec.generate(AutoRegressive(ctx), PROMPT, 40, 7)
    g = dec.generate(Oracle(ctx, ar.output_ids, tree=tree), PROMPT, 40, 7)
    assert g.output_ids == ar.output_ids
    per_step = 3 if tree else 6  # tree: 3 true nodes fit in 6 slots next to their wrong siblings
    assert all(n == per_step + 1 for n in g.accept_lengths[:-1])
    assert g.draft_path_lengths[:-1] == [per_step] * (g.steps - 1)  # every offer taken: nothing refused
    assert max(g.budget_used) <= 7


def test_budget_is_enforced(tiny_model, tiny_tok):
    dec = Decoder(as_target(tiny_model), {EOS})
    with pytest.raises(BudgetExceeded):
        dec.generate(Greedy(MethodContext(tiny_model, tiny_tok, budget=4)), PROMPT, 10, 4)


def test_generation_stops_at_eos_and_at_the_cap(tiny_model, tiny_tok):
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=1)
    g = dec.generate(AutoRegressive(ctx), PROMPT, 25, 1)
    assert len(g.output_ids) <= 25
    assert EOS not in g.output_ids[:-1]
    # stopping at a token the model does produce: the output ends right there
    stop = g.output_ids[3]
    g2 = Decoder(as_target(tiny_model), {stop}).generate(AutoRegressive(ctx), PROMPT, 25, 1)
    assert g2.output_ids == g.output_ids[: g.output_ids.index(stop) + 1]
    assert g.steps == len(g.output_ids) - 1 and g.accept_lengths == [1] * g.steps


def test_a_step_that_accepts_past_eos_or_the_cap_ends_the_answer_and_counts_only_what_it_keeps(tiny_model, tiny_tok):
    """A draft accepted across the stop token ends the answer at that step (the loop used to go on
    drafting past it), and each step's accept length counts only the tokens the output keeps, so
    #MAT is the answer's tokens per step."""
    ctx = MethodContext(tiny_model, tiny_tok, budget=7)
    ref = Decoder(as_target(tiny_model), {EOS}).generate(AutoRegressive(ctx), PROMPT, 40, 7).output_ids
    at = next(i for i in range(2, len(ref)) if ref[i] not in ref[:i])   # a token first produced mid-step
    g = Decoder(as_target(tiny_model), {ref[at]}).generate(Oracle(ctx, ref), PROMPT, 40, 7)
    assert g.output_ids == ref[:at + 1]
    assert g.steps == 1 + (at - 1) // 7 and sum(g.accept_lengths) + 1 == len(g.output_ids)
    # the cap: 10 tokens, the oracle's second step accepts 7 where 2 fit
    g = Decoder(as_target(tiny_model), {EOS}).generate(Oracle(ctx, ref), PROMPT, 10, 7)
    assert g.output_ids == ref[:10] and g.accept_lengths == [7, 2]
