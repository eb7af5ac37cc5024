"""Every registered lossless method reproduces AR's greedy tokens exactly in float32, at
several block complexities, and never exceeds its budget, on transformers' forward and on the
lean forward with kernel plans that give every bucket of block sizes another matrix kernel (AR's
one-token steps and a method's blocks then run on different kernels, as a timed plan may
choose). New methods join automatically."""

from __future__ import annotations

import os

import pytest
import torch
from helpers.artifacts import DATASTORE_PROMPTS, artifact_options, expects_acceptance
from helpers.tiny import EOS, make_model, save_noisy_copy

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target
from specbench_cli.targets.hf.forward import kernels, lean
from specbench_cli.targets.hf.forward.short import register as register_short

LOSSLESS = [n for n in methods.names() if methods.get(n).lossless]
if os.environ.get("SPECBENCH_TEST_METHODS"):  # benchmarks/gpu/check.sh --quick: a few methods only
    LOSSLESS = [n for n in LOSSLESS if n in os.environ["SPECBENCH_TEST_METHODS"].split(",")]

PROMPTS = DATASTORE_PROMPTS  # one repetitive: lookup-style drafts get accepted; the tiny datastore answers them


KERNELS = kernels.available(torch.float32)
BUCKETS = len(kernels.BUCKETS) + 1
# each plan gives consecutive buckets different kernels; the second starts elsewhere, so AR's
# q = 1 and the blocks' buckets meet other pairs of kernels
MIXED_PLANS = {f"lean-mixed{r}": [KERNELS[(i + r) % len(KERNELS)] for i in range(BUCKETS)] for r in (0,)}


# benchmarks/gpu/check.sh runs this test on another device and dtype (the lean forward is CPU-only)
DEVICE = os.environ.get("SPECBENCH_TEST_DEVICE", "cpu")
DTYPE = os.environ.get("SPECBENCH_TEST_DTYPE", "float32")


@pytest.fixture(scope="module", params=["sdpa", *MIXED_PLANS, "native"])
def target(request):
    """The tiny target on transformers' forward, on the lean forward with a mixed kernel plan, or
    on the native forward (the C library; skipped where no C compiler builds it, never under CI)."""
    if DEVICE != "cpu" or DTYPE != "float32":
        if request.param != "sdpa":
            pytest.skip(f"the lean forward's kernel plans are float32 CPU kernels (device {DEVICE}, {DTYPE})")
        return make_model(0).to(DEVICE, getattr(torch, DTYPE))
    model = make_model(0)
    if request.param == "native":
        from specbench_cli.targets.hf.forward.native.model import install

        register_short()
        model.set_attn_implementation("short")
        try:
            install(model)
        except RuntimeError as e:
            if os.environ.get("CI"):
                raise
            pytest.skip(f"the native forward is unavailable here: {e}")
        return model
    if request.param != "sdpa":
        register_short()
        model.set_attn_implementation("short")
        lean.install(model)
        r = int(request.param[-1])  # attention alternates between short and sdpa across buckets too
        attention = [kernels.ATTENTION[(i + r) % 2] for i in range(BUCKETS)]
        lean.install(model, kernels.Plan(choices={shape: MIXED_PLANS[request.param]
                                                  for shape in lean.weight_groups(model)}, attention=attention))
    return model


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    """A draft model for methods that take --draft-model: the tiny target with noise on every
    weight, so it agrees with the target often but not always (acceptances and rejections)."""
    return save_noisy_copy(make_model(0), tmp_path_factory.mktemp("tiny-draft"), 0.3)


def test_registry_has_the_baseline_and_pld():
    assert {"ar", "pld"} <= set(LOSSLESS)


@pytest.mark.parametrize("budget", [1, 4, 10, 30, 60])
@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_method_equals_ar_greedy(name, budget, target, tiny_tok, draft_dir, request):
    dec = Decoder(as_target(target), {EOS})
    ctx = MethodContext(target, tiny_tok, budget=budget, draft_model=draft_dir)
    ar = methods.get("ar").create(ctx)
    # what the method declares it needs (`requires`): tiny heads of its kind, a datastore, a draft model
    method = methods.get(name).create(ctx, **artifact_options(methods.get(name), request))
    accepted_extra = 0
    for prompt in PROMPTS:
        ref = dec.generate(ar, prompt, 48, budget)
        if method.reference_drafts:  # synthetic drafts from AR's answer: hand it over
            method.refer(prompt, ref.output_ids)
        got = dec.generate(method, prompt, 48, budget)
        assert got.output_ids == ref.output_ids, f"{name} differs from AR at BC={budget}"
        assert max(got.budget_used, default=1) <= budget
        accepted_extra += sum(got.accept_lengths) - got.steps
    if budget > 1 and (expects_acceptance(methods.get(name)) or method.reference_drafts):
        # not a proof of speed, but a method that never gets a draft token accepted on these
        # prompts is almost surely not drafting at all
        assert accepted_extra > 0, f"{name} had no draft token accepted at BC={budget}"


ADAPTIVE = [n for n in LOSSLESS if methods.get(n).adaptive_budget]


def test_the_methods_that_take_an_adaptive_budget():
    assert {"pld", "samd", "suffix", "recycling", "rest"} <= set(ADAPTIVE)


@pytest.mark.parametrize("name", ADAPTIVE)
def test_adaptive_budget_equals_ar_greedy(name, target, tiny_tok, draft_dir, request):
    """An adaptive budget (decoding/budget.py) learned on the prompts with whole drafts, then frozen
    on a steep cost curve so that it trims: still AR's tokens, and it verified less than whole."""
    from specbench_cli.decoding.budget import AcceptanceTable, AdaptiveBudget

    budget = 24
    steep = [10.0 + 3.0 * (q - 1) for q in range(1, budget + 1)]
    dec = Decoder(as_target(target), {EOS})
    ctx = MethodContext(target, tiny_tok, budget=budget, draft_model=draft_dir)
    ar = methods.get("ar").create(ctx)
    method = methods.get(name).create(ctx, **artifact_options(methods.get(name), request))
    adaptive = AdaptiveBudget(AcceptanceTable(), steep, learning=True)
    whole = [dec.generate(method, prompt, 48, budget, policy=adaptive) for prompt in PROMPTS]
    adaptive.freeze()
    q_whole, q_trimmed = [], []
    for prompt, w in zip(PROMPTS, whole):
        ref = dec.generate(ar, prompt, 48, budget)
        got = dec.generate(method, prompt, 48, budget, policy=adaptive)
        assert w.output_ids == ref.output_ids and got.output_ids == ref.output_ids, f"{name}@adaptive differs from AR"
        q_whole += w.budget_used
        q_trimmed += got.budget_used
    assert adaptive.table.counts, f"{name} drafted nothing to learn from"
    assert sum(q_trimmed) / len(q_trimmed) <= sum(q_whole) / len(q_whole)
