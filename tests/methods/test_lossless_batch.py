"""The lossless test with a batch dimension: at batch sizes 1, 2 and 4, with prompts of mixed
lengths decoded together, every registered lossless method reproduces, sequence by sequence,
the greedy float32 tokens of AR decoded at the same batch size, gets drafts accepted and never
exceeds its budget; on transformers' forward and on the lean forward with mixed kernel plans
(test_lossless.py's fixtures). Each sequence is drafted by its own copy of the method
(run/replicas.py), and those copies decode exactly as independently built instances do: no
drafting state is shared between the sequences of a batch. New methods join automatically."""

from __future__ import annotations

import pytest
from helpers.artifacts import artifact_options, expects_acceptance
from helpers.tiny import EOS
from test_lossless import (  # noqa: F401 - the lossless test's fixtures: the same targets and draft model
    LOSSLESS,
    draft_dir,
    target,
)

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.run.replicas import replicas
from specbench_cli.targets import as_target

# mixed lengths; the repetitive ones give lookup-style drafts something to accept
PROMPTS = [
    [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14],
    [2, 40, 41, 42, 40, 41, 42, 40, 41],
    [2, 77],
    [2, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61],
]
CAPS = [40, 33, 40, 27]  # different caps: sequences leave the batch at different steps

# REST's retrieval library ranks equally frequent continuations in an order that changes from one
# search to the next: the same instance on the same prompt drafts differently run after run, so
# its copies cannot be compared draft for draft with other instances (its tokens still are).
IRREPRODUCIBLE_DRAFTS = {"rest"}


def _options(name, request):
    return artifact_options(methods.get(name), request)


@pytest.mark.parametrize("budget", [4, 10])
@pytest.mark.parametrize("name", LOSSLESS)
def test_every_sequence_equals_ar_at_the_same_batch_size(name, budget, target, tiny_tok, draft_dir, request):  # noqa: F811
    dec = Decoder(as_target(target), {EOS})
    ctx = MethodContext(target, tiny_tok, budget=budget, draft_model=draft_dir)
    options = _options(name, request)
    accepted_extra = 0
    for n in (1, 2, 4):
        prompts, caps = PROMPTS[:n], CAPS[:n]
        ar = dec.generate_batch([methods.get("ar").create(ctx) for _ in prompts], prompts, caps, budget)
        copies = replicas(methods.get(name).create(ctx, **options), n,
                          lambda: methods.get(name).create(ctx, **options))
        got = dec.generate_batch(copies, prompts, caps, budget)
        for i, (g, r) in enumerate(zip(got, ar)):
            assert g.output_ids == r.output_ids, f"{name} sequence {i} differs from AR at N={n}, BC={budget}"
            assert max(g.budget_used, default=1) <= budget
            accepted_extra += sum(g.accept_lengths) - g.steps
        if name in IRREPRODUCIBLE_DRAFTS:
            continue
        built = dec.generate_batch([methods.get(name).create(ctx, **options) for _ in prompts], prompts, caps, budget)
        assert [(g.output_ids, g.accept_lengths) for g in got] == [(b.output_ids, b.accept_lengths) for b in built], \
            f"{name}: its copies draft unlike independently built instances at N={n}"
    if expects_acceptance(methods.get(name)):
        assert accepted_extra > 0, f"{name} had no draft token accepted in a batch at BC={budget}"


def _filled(g) -> set[str]:
    """The Generation fields that hold something (a non-empty list, a non-zero number, stats)."""
    import dataclasses

    return {f.name for f in dataclasses.fields(g) if getattr(g, f.name) not in (None, [], 0, 0.0, {})}


@pytest.mark.parametrize("name", methods.names())
def test_every_field_filled_at_batch_size_1_is_filled_at_batch_size_4(name, target, tiny_tok, draft_dir, request):  # noqa: F811
    """One loop for every batch size: nothing a method records at N = 1 (per-position acceptance,
    hidden-state bookkeeping, a lossy method's epilogue and stats) is missing at N = 4."""
    dec = Decoder(as_target(target), {EOS})
    ctx = MethodContext(target, tiny_tok, budget=6, draft_model=draft_dir)
    options = _options(name, request)
    (one,) = dec.generate_batch([methods.get(name).create(ctx, **options)], PROMPTS[3:4], CAPS[3:4], 6)
    four = dec.generate_batch([methods.get(name).create(ctx, **options) for _ in PROMPTS], PROMPTS, CAPS, 6)
    assert "draft_path_lengths" in _filled(one) or methods.get(name).structure.value == "none"
    missing = _filled(one) - _filled(four[3])
    assert not missing, f"{name} fills {sorted(missing)} at batch size 1 but not at batch size 4"
