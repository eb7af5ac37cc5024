"""Every registered lossless method reproduces AR's greedy tokens exactly in float32, at
several block complexities, and never exceeds its budget. New methods join automatically."""

from __future__ import annotations

import pytest

from specbench_cli import methods
from specbench_cli.engine.loop import Decoder
from specbench_cli.methods.base import MethodContext
from tiny import EOS, save_tiny

LOSSLESS = [n for n in methods.names() if methods.get(n).lossless]

PROMPTS = [
    [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14],
    [2, 40, 41, 42, 40, 41, 42, 40, 41],           # repetitive: lookup-style drafts get accepted
    [2, 77],
]


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    """A second tiny model sharing the tokenizer, for methods that take --draft-model."""
    return str(save_tiny(tmp_path_factory.mktemp("tiny-draft"), seed=1, layers=1))


def test_registry_has_the_baseline_and_pld():
    assert {"ar", "pld"} <= set(LOSSLESS)


@pytest.mark.parametrize("budget", [1, 4, 10, 30])
@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_method_equals_ar_greedy(name, budget, tiny_model, tiny_tok, draft_dir):
    dec = Decoder(tiny_model, {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget, draft_model=draft_dir)
    ar = methods.get("ar")(ctx)
    method = methods.get(name)(ctx)
    accepted_extra = 0
    for prompt in PROMPTS:
        ref = dec.generate(ar, prompt, 48, budget)
        got = dec.generate(method, prompt, 48, budget)
        assert got.output_ids == ref.output_ids, f"{name} differs from AR at BC={budget}"
        assert max(got.budget_used, default=1) <= budget
        accepted_extra += sum(got.accept_lengths) - got.steps
    if budget > 1 and name not in ("ar",):
        # not a proof of speed, but a method that never gets a draft token accepted on these
        # prompts is almost surely not drafting at all
        assert accepted_extra > 0, f"{name} had no draft token accepted at BC={budget}"
