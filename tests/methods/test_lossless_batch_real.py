"""The batch lossless test on the embedded model (SmolLM2-135M, float32): at batch sizes 2 and 4,
prompts of very different lengths decoded together, every draft-free lossless method reproduces,
sequence by sequence, AR's greedy tokens at the same batch size on the native forward (the CPU
default), and gets drafts accepted; on transformers' forward a chain, a tree and a suffix drafter
do (every method's batches on transformers' and the lean forward are checked on the tiny model in
test_lossless_batch.py). Slow, marked."""

from __future__ import annotations

import pytest
from helpers.artifacts import expects_acceptance
from helpers.embedded import needs_model

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.run.replicas import replicas
from specbench_cli.targets import as_target

pytestmark = pytest.mark.slow

DRAFT_FREE_LOSSLESS = [n for n in methods.names() if methods.get(n).lossless and not methods.get(n).needs_training]

SDPA_METHODS = ("pld", "lookahead", "suffix")
QUESTIONS = ("s1", "t1", "q1", "m1")  # summarization (long, copy-heavy), translation, qa, math: mixed lengths


@pytest.fixture(scope="module", params=["sdpa", "native"])
def smol(request):
    from specbench_cli.models.load import load_model

    return load_model("smollm2-135m", forward=request.param, kernels="mkl")


@pytest.fixture(scope="module")
def prompts(smol):
    from specbench_cli import tasks
    from specbench_cli.models.prompting import ChatPrompter, user_turn

    prompter = ChatPrompter(smol.tokenizer)
    qs = {q.id: q for q in tasks.get("mini").load()}
    out = [prompter(user_turn(qs[qid].turns[0])) for qid in QUESTIONS]
    assert max(map(len, out)) > 2 * min(map(len, out))  # the batch mixes short and long prompts
    return out


@pytest.fixture(scope="module")
def ar_batches(smol, prompts):
    """AR's batches of 2 and 4 on this forward, decoded once for every method's comparison."""
    dec = Decoder(as_target(smol.model), {smol.tokenizer.eos_token_id})
    ctx = MethodContext(smol.model, smol.tokenizer, budget=10)
    return {n: dec.generate_batch([methods.get("ar").create(ctx) for _ in range(n)], prompts[:n], [24] * n, 10)
            for n in (2, 4)}


@needs_model
@pytest.mark.parametrize("name", [n for n in DRAFT_FREE_LOSSLESS if n != "ar"])
def test_every_sequence_equals_ar_at_the_same_batch_size_on_the_real_model(smol, prompts, ar_batches, name, request):
    if request.node.callspec.params["smol"] == "sdpa" and name not in SDPA_METHODS:
        pytest.skip("transformers' forward: a chain, a tree and a suffix drafter here (every method's batches on "
                    "it: the tiny model, test_lossless_batch.py)")
    dec = Decoder(as_target(smol.model), {smol.tokenizer.eos_token_id})
    ctx = MethodContext(smol.model, smol.tokenizer, budget=10)
    accepted = 0
    for n in (2, 4):
        batch, caps = prompts[:n], [24] * n
        ar = ar_batches[n]
        copies = replicas(methods.get(name).create(ctx), n, lambda: methods.get(name).create(ctx))
        got = dec.generate_batch(copies, batch, caps, 10)
        for i, (g, r) in enumerate(zip(got, ar)):
            assert g.output_ids == r.output_ids, f"{name}: sequence {QUESTIONS[i]} differs from AR at N={n}"
            assert max(g.budget_used) <= 10
            accepted += sum(g.accept_lengths) - g.steps
    if expects_acceptance(methods.get(name)):
        assert accepted > 0, f"{name} had no draft token accepted in a batch"
