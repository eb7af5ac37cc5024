"""The published static trees: Medusa's `mc_sim_7b_63` (Spec-Bench's Medusa setting) and
EAGLE-1's 25-node tree, as `-o medusa.choices=` / `-o eagle.tree=`."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.tiny import EOS

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.core.tree_shapes import EAGLE1_25, MC_SIM_7B_63, read_paths
from specbench_cli.methods.heads.draft_trees import medusa_tree
from specbench_cli.targets import as_target

PROMPTS = [[2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14], [2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 77]]


def medusa_reference_buffers(logits: torch.Tensor, choices: list[list[int]]) -> set[tuple[int, ...]]:
    """Medusa's own construction, written from its description: choices sorted by (depth, ranks);
    node = the r-th best token of head `depth - 1`; the tree is the set of root-to-node token
    sequences (what its tree indices, attention mask and retrieve indices encode)."""
    ordered = sorted(choices, key=lambda c: (len(c), c))
    top = logits.topk(1 + max(max(c) for c in choices), dim=-1).indices
    return {tuple(int(top[d][c[d]]) for d in range(len(c))) for c in ordered}


def our_sequences(tree) -> set[tuple[int, ...]]:
    out = set()
    for i in range(len(tree.tokens)):
        seq, j = [], i
        while j >= 0:
            seq.append(tree.tokens[j])
            j = tree.parents[j]
        out.add(tuple(reversed(seq)))
    return out


def test_the_published_trees_have_their_published_sizes():
    assert len(MC_SIM_7B_63) == 63 and max(map(len, MC_SIM_7B_63)) == 4
    assert len(EAGLE1_25) == 25 and max(map(len, EAGLE1_25)) == 5
    from specbench_cli.methods.core.tree_shapes import VICUNA_7B_STAGE2

    assert len(VICUNA_7B_STAGE2) == 63 and max(map(len, VICUNA_7B_STAGE2)) == 4
    assert len({tuple(p) for p in VICUNA_7B_STAGE2}) == 63  # no repeated path
    assert all(tuple(p[:-1]) in {tuple(q) for q in VICUNA_7B_STAGE2} for p in VICUNA_7B_STAGE2 if len(p) > 1)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("tree_name", ["mc_sim_7b_63", "vicuna_7b_stage2"])
def test_published_medusa_trees_give_medusa_s_tree_at_64_tokens(seed, tree_name):
    from specbench_cli.methods.core.tree_shapes import NAMED

    paths = NAMED[tree_name]
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(5, 300, generator=g)
    tree = medusa_tree(logits, paths, budget=63)
    assert len(tree.tokens) == 63
    assert our_sequences(tree) == medusa_reference_buffers(logits, paths)
    assert all(p < i for i, p in enumerate(tree.parents))


@pytest.mark.parametrize("budget", [1, 4, 10, 30, 60])
@pytest.mark.parametrize("name, options", [("medusa", {"choices": "mc_sim_7b_63"}),
                                           ("medusa", {"choices": "vicuna_7b_stage2"}), ("eagle", {"tree": "eagle1_25"}),
                                           ("eagle", {"tree": "mc_sim_7b_63"})])
def test_static_trees_decode_exactly_like_ar(name, options, budget, tiny_model, tiny_tok, tiny_heads):
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    ar = methods.get("ar").create(ctx)
    method = methods.get(name).create(ctx, heads=tiny_heads[name], **options)
    accepted = 0
    for prompt in PROMPTS:
        ref, got = dec.generate(ar, prompt, 40, budget), dec.generate(method, prompt, 40, budget)
        assert got.output_ids == ref.output_ids
        assert max(got.budget_used, default=1) <= budget
        accepted += sum(got.accept_lengths) - got.steps
    assert budget == 1 or accepted > 0


def test_eagle_static_tree_has_the_listed_shape(tiny_model, tiny_tok, tiny_heads):
    """At BC 26 EAGLE-1's tree drafts exactly its 25 nodes with the listed parents."""
    from specbench_cli.decoding.drafter import DecodeState

    ctx = MethodContext(tiny_model, tiny_tok, budget=26)
    method = methods.get("eagle").create(ctx, heads=tiny_heads["eagle"], tree="eagle1_25", vocab="full")
    prompt = PROMPTS[0]
    method.reset(prompt)
    with torch.no_grad():
        out = tiny_model(torch.tensor([prompt]), output_hidden_states=True)
    hidden = out.hidden_states[-1][0]
    state = DecodeState(ids=prompt + [int(out.logits[0, -1].argmax())], prompt_len=len(prompt), budget=26,
                        remaining=10, step=0, hidden=hidden)
    draft = method.propose(state)
    index = {tuple(p): i for i, p in enumerate(EAGLE1_25)}
    assert len(draft.tokens) == 25
    assert list(draft.parents) == [-1 if len(p) == 1 else index[tuple(p[:-1])] for p in EAGLE1_25]


def test_tree_files_and_bad_names(tmp_path):
    good = tmp_path / "t.json"
    good.write_text(json.dumps([[0], [0, 0], [1]]))
    assert read_paths(str(good), "x") == [[0], [0, 0], [1]]
    orphan = tmp_path / "o.json"
    orphan.write_text(json.dumps([[0], [1, 0]]))
    with pytest.raises(UsageError, match="has no parent"):
        read_paths(str(orphan), "x")
    with pytest.raises(UsageError, match="neither a known tree"):
        methods.get("medusa")(MethodContext(), heads="h", choices="vicuna_7b_stage9")
