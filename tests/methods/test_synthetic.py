"""The synthetic method (methods/synthetic.py): its options; handed AR's answers it reproduces
them (lossless: the verifier decides) while its measured conditional acceptance per draft
position is the set probability (exact counts with a fixed seed, so the bound cannot flake: the
same counts every run); without a reference it drafts nothing; the same request drafts the same
alone, in a static batch and in a running one; and `specbench run` hands it the `ar` rows, on the
embedded model (slow)."""

from __future__ import annotations

import json
import math
import random

import pytest
from helpers.embedded import needs_model
from helpers.tiny import EOS

from specbench_cli import methods
from specbench_cli.decoding.continuous import ContinuousBatch
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.report.metrics import conditional_acceptance
from specbench_cli.run.plan import default_methods
from specbench_cli.targets import as_target

BUDGET = 6  # 5 draft positions per step


def _prompts(n: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    return [[2] + [rng.randrange(4, 128) for _ in range(rng.randint(3, 12))] for _ in range(n)]


def _within(rate: float, p: float, n: int) -> bool:
    """`rate` over `n` Bernoulli(p) trials is within 4.5 standard deviations of p (plus one count)."""
    return abs(rate - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1 / n


@pytest.mark.parametrize("given,want", [("0.6", (0.6,)), ("0.9, 0.8,0.6", (0.9, 0.8, 0.6)), ("1", (1.0,)), ("0", (0.0,))])
def test_accept_takes_one_probability_or_one_per_position(given, want):
    m = methods.get("synthetic")(MethodContext(budget=BUDGET), accept=given)
    assert m.accept == want and m.k == BUDGET - 1 and m.params()["accept"] == list(want)


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "a", "0.5,,0.4", "nan,0.2"])
def test_a_bad_accept_is_one_usage_error(bad):
    with pytest.raises(UsageError, match="synthetic.accept"):
        methods.get("synthetic")(MethodContext(budget=BUDGET), accept=bad)


def test_it_is_lossless_but_not_a_default_method_and_takes_no_adaptive_budget():
    spec = methods.get("synthetic")
    assert spec.lossless and spec.reference_drafts and not spec.needs_training and not spec.adaptive_budget
    assert "synthetic" not in default_methods() and "pld" in default_methods()


@pytest.fixture(scope="module")
def answers(tiny_model):
    dec = Decoder(as_target(tiny_model), {EOS})
    ar = methods.get("ar").create(MethodContext(tiny_model, None, budget=BUDGET))
    prompts = _prompts(24)
    return dec, prompts, [dec.generate(ar, p, 64, BUDGET).output_ids for p in prompts]


@pytest.mark.parametrize("accept", ["0.6", "0.9,0.5,0.75"])
def test_handed_ar_answers_it_reproduces_them_at_the_set_acceptance(tiny_model, answers, accept):
    dec, prompts, refs = answers
    m = methods.get("synthetic").create(MethodContext(tiny_model, None, budget=BUDGET), accept=accept, seed=3)
    for p, ref in zip(prompts, refs):
        m.refer(p, ref)
    gens = [dec.generate(m, p, 64, BUDGET) for p in prompts]
    assert [g.output_ids for g in gens] == refs
    probs = m.accept
    rates = conditional_acceptance([g.accept_lengths for g in gens], [g.draft_path_lengths for g in gens])
    lengths = [a for g in gens for a in g.accept_lengths]
    paths = [x for g in gens for x in g.draft_path_lengths]
    assert sum(g.stats["reference"] for g in gens) == len(prompts)
    for k in (1, 2, 3):
        offered = sum(1 for a, x in zip(lengths, paths) if x >= k and a - 1 >= k - 1)
        assert offered >= 60, f"position {k}: too few steps to measure ({offered})"
        p = probs[min(k - 1, len(probs) - 1)]
        assert _within(rates[k], p, offered), f"position {k}: measured {rates[k]:.3f}, set {p} over {offered} steps"


def test_at_acceptance_one_every_draft_is_taken_and_at_zero_none(tiny_model, answers):
    dec, prompts, refs = answers
    for accept, whole in (("1", True), ("0", False)):
        m = methods.get("synthetic").create(MethodContext(tiny_model, None, budget=BUDGET), accept=accept)
        for p, ref in zip(prompts[:4], refs[:4]):
            m.refer(p, ref)
            g = dec.generate(m, p, 64, BUDGET)
            assert g.output_ids == ref
            drafted = [d for d in g.draft_sizes]
            accepted = [a - 1 for a in g.accept_lengths]
            if whole:  # every step takes its whole draft (the last may be cut at the cap or EOS)
                assert all(a == d for a, d in zip(accepted[:-1], drafted[:-1])) and max(drafted) == BUDGET - 1
            else:
                assert not any(accepted) and max(drafted) == BUDGET - 1


def test_without_a_reference_it_drafts_nothing(tiny_model, answers):
    dec, prompts, refs = answers
    m = methods.get("synthetic").create(MethodContext(tiny_model, None, budget=BUDGET))
    g = dec.generate(m, prompts[0], 64, BUDGET)
    assert g.output_ids == refs[0] and not any(g.draft_sizes) and g.stats["reference"] == 0


def test_the_same_request_drafts_the_same_alone_in_a_static_batch_and_in_a_running_one(tiny_model, answers):
    dec, prompts, refs = answers
    ctx = MethodContext(tiny_model, None, budget=BUDGET)
    m = methods.get("synthetic").create(ctx)
    for p, ref in zip(prompts[:4], refs[:4]):
        m.refer(p, ref)
    alone = [dec.generate(m, p, 64, BUDGET).accept_lengths for p in prompts[:4]]
    copies = [m] + [methods.get("synthetic").create(ctx) for _ in range(3)]
    for c in copies[1:]:  # separately built instances: handed the same answers
        for p, ref in zip(prompts[:4], refs[:4]):
            c.refer(p, ref)
    static = dec.generate_batch(copies, prompts[:4], [64] * 4, BUDGET)
    assert [g.accept_lengths for g in static] == alone
    batch, done = ContinuousBatch(dec, BUDGET), {}
    for i in range(4):
        batch.join(i, copies[i], prompts[i], 64)
        for e in batch.step():
            if e.done is not None:
                done[e.key] = e.done
    while len(batch):
        for e in batch.step():
            if e.done is not None:
                done[e.key] = e.done
    assert [done[i].accept_lengths for i in range(4)] == alone


@pytest.mark.slow
@needs_model
def test_specbench_run_hands_synthetic_the_ar_rows(tmp_path):
    """ar + synthetic on the mini task (one question per category), 24 tokens at BC 6: synthetic's
    answers are AR's (`ar_match`) and its pooled first-position acceptance is near the set 0.6
    (exact counts, fixed seed)."""
    from specbench_cli.config import (
        BudgetSection,
        DecodingSection,
        MethodsSection,
        ModelSection,
        OutputSection,
        RunConfig,
        TaskSection,
    )
    from specbench_cli.run.workflow import execute

    cfg = RunConfig(methods=MethodsSection(names=["ar", "synthetic"], options={"synthetic": {"accept": "0.6"}}),
                    task=TaskSection(tasks=["mini"], limit=1), decoding=DecodingSection(max_new_tokens=24),
                    budget=BudgetSection(block_complexity=6),
                    output=OutputSection(dir=str(tmp_path)), model=ModelSection(threads=2))
    run = execute(cfg, report=False)
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    syn = [r for r in rows if r["method"] == "synthetic"]
    assert syn and all(r["status"] == "ok" and r["ar_match"] for r in syn)
    assert all(r["method_stats"]["reference"] == 1 for r in syn)
    lengths = [a for r in syn for a in r["accept_lengths"]]
    paths = [x for r in syn for x in r["draft_path_lengths"]]
    offered = sum(1 for x in paths if x >= 1)
    rate = conditional_acceptance([lengths], [paths])[1]
    assert offered >= 40 and _within(rate, 0.6, offered), f"measured {rate:.3f} over {offered} steps"
