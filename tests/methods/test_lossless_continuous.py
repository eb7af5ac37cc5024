"""Continuous batching (decoding/continuous.py): sequences that join a running batch between
steps and leave when they end decode, sequence by sequence, the tokens of a static batch
(`generate_batch`) and of a batch of one, for every registered lossless method on the tiny
model (a lossy one: a static batch's tokens); the tokens streamed per join and step are the answer; a batch whose early rows left is
packed to the front of its buffers and still decodes the same; a target without `join` is
refused at once."""

from __future__ import annotations

import pytest
from helpers.artifacts import artifact_options
from helpers.tiny import EOS
from test_lossless import LOSSLESS, draft_dir  # noqa: F401 - its draft model fixture

from specbench_cli import methods
from specbench_cli.decoding.continuous import ContinuousBatch
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.target import Target, TargetError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target

PROMPTS = [
    [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14],
    [2, 40, 41, 42, 40, 41, 42, 40, 41],
    [2, 77],
    [2, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61, 62, 63, 60, 61],
    [2, 50, 51, 50, 51, 50],
]
CAPS = [30, 21, 30, 17, 25]
BUDGET = 6


def staggered(dec, make, prompts, caps, every: int = 2, at_once: int = 1, slots: int = 99):
    """Decode `prompts` in a running batch: `at_once` of them join every `every` steps (at most
    `slots` in flight). Returns per prompt (Generation, streamed tokens) and the batch."""
    batch = ContinuousBatch(dec, BUDGET)
    done, streamed, waiting, step = {}, {i: [] for i in range(len(prompts))}, list(range(len(prompts))), 0
    while waiting or len(batch):
        if step % every == 0:
            for _ in range(at_once):
                if waiting and len(batch) < slots:
                    i = waiting.pop(0)
                    e = batch.join(i, make(i), prompts[i], caps[i])
                    streamed[i] += e.tokens
                    if e.done is not None:
                        done[i] = e.done
        for e in batch.step():
            streamed[e.key] += e.tokens
            if e.done is not None:
                done[e.key] = e.done
        step += 1
    return {i: (done[i], streamed[i]) for i in done}, batch


@pytest.mark.parametrize("name", LOSSLESS)
def test_joining_a_running_batch_decodes_as_a_static_batch_and_alone(name, tiny_model, tiny_tok, draft_dir, request):  # noqa: F811
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=BUDGET, draft_model=draft_dir)
    spec, options = methods.get(name), artifact_options(methods.get(name), request)
    ar = methods.get("ar").create(ctx)
    alone = [dec.generate(ar, p, c, BUDGET).output_ids for p, c in zip(PROMPTS, CAPS)]

    def make(i):
        m = spec.create(ctx, **options)
        if spec.reference_drafts:  # synthetic drafts from AR's answer
            m.refer(PROMPTS[i], alone[i])
        return m

    static = dec.generate_batch([make(i) for i in range(len(PROMPTS))], PROMPTS, CAPS, BUDGET)
    got, _ = staggered(dec, make, PROMPTS, CAPS)
    for i in range(len(PROMPTS)):
        gen, streamed = got[i]
        assert gen.output_ids == static[i].output_ids == alone[i], f"{name}: sequence {i} differs"
        assert streamed == gen.output_ids, f"{name}: the streamed tokens of sequence {i} are not its answer"
        assert len(gen.accept_lengths) == gen.steps and sum(gen.accept_lengths) == len(gen.output_ids) - 1
        assert max(gen.budget_used, default=1) <= BUDGET


@pytest.mark.parametrize("name", [n for n in methods.names() if not methods.get(n).lossless])
def test_a_lossy_method_decodes_in_a_running_batch_as_in_a_static_one(name, tiny_model, tiny_tok, request):
    """A lossy method (fastcot: it ends early and its epilogue decodes an answer on the sequence's
    own keys and values when it leaves) gives the answers of a static batch."""
    dec = Decoder(as_target(tiny_model), {EOS})
    ctx = MethodContext(tiny_model, tiny_tok, budget=BUDGET)
    spec, options = methods.get(name), artifact_options(methods.get(name), request)
    static = dec.generate_batch([spec.create(ctx, **options) for _ in PROMPTS], PROMPTS, CAPS, BUDGET)
    got, _ = staggered(dec, lambda i: spec.create(ctx, **options), PROMPTS, CAPS)
    for i in range(len(PROMPTS)):
        assert got[i][0].output_ids == static[i].output_ids, f"{name}: sequence {i} differs from a static batch"
        assert got[i][1] == got[i][0].output_ids


def test_a_batch_whose_early_rows_left_is_packed_and_decodes_the_same(tiny_model):
    """A long request and a stream of short ones, two in flight: once the long one leaves, the
    short row left starts where the long one ended; the next prompt to join finds the batch packed
    to the front of its buffers (without packing the write slot would keep the long one's length
    and grow from there), and every request decodes as alone."""
    dec = Decoder(as_target(tiny_model), {EOS})
    prompts = [PROMPTS[0]] + [PROMPTS[1 + i % 4] for i in range(14)]
    caps = [120] + [6] * 14
    make = lambda: methods.get("pld").create(MethodContext(tiny_model, None, budget=BUDGET))  # noqa: E731
    alone = [dec.generate(make(), p, c, BUDGET).output_ids for p, c in zip(prompts, caps)]
    assert len(alone[0]) == 120  # the long one lives through many short ones
    batch = ContinuousBatch(dec, BUDGET)
    waiting, done, joins = list(range(len(prompts))), {}, 0
    while waiting or len(batch):
        while waiting and len(batch) < 2:
            i = waiting.pop(0)
            batch.join(i, make(), prompts[i], caps[i])
            cache = batch.batch.cache
            longest = max(e - s for s, e in zip(cache.starts, cache.ends))
            assert cache.length <= 2 * longest + 16 + BUDGET, f"request {i} joined an unpacked batch"
            joins += 0 not in done and i > 0
        for e in batch.step():
            if e.done is not None:
                done[e.key] = e.done.output_ids
    assert [done[i] for i in range(len(prompts))] == alone
    assert joins < len(prompts) - 1  # some short ones joined after the long one left


def test_the_zero_cost_target_takes_joins(tiny_tok):
    from specbench_cli.targets.zero_cost import ZeroCostTarget

    dec = Decoder(ZeroCostTarget(vocab=128, count=False), {EOS})
    ctx = MethodContext(None, tiny_tok, budget=BUDGET)
    alone = [dec.generate(methods.get("pld").create(ctx), p, c, BUDGET).output_ids for p, c in zip(PROMPTS, CAPS)]
    got, _ = staggered(dec, lambda i: methods.get("pld").create(ctx), PROMPTS, CAPS, every=3)
    assert [got[i][0].output_ids for i in range(len(PROMPTS))] == alone


def test_a_sequence_that_ends_at_its_first_token_leaves_at_once(tiny_model):
    dec = Decoder(as_target(tiny_model), {EOS})
    batch = ContinuousBatch(dec, BUDGET)
    e = batch.join("a", methods.get("ar").create(MethodContext(tiny_model, None, budget=BUDGET)), PROMPTS[0], 1)
    assert e.done is not None and e.tokens == e.done.output_ids and len(e.tokens) == 1 and len(batch) == 0
    assert batch.step() == []


def test_a_target_without_join_is_refused_and_keys_and_drafters_are_per_sequence(tiny_model):
    class Static(Target):
        name = "static"
        device = "cpu"

    with pytest.raises(TargetError, match="running batch"):
        ContinuousBatch(Decoder(Static(), {EOS}), BUDGET)
    batch = ContinuousBatch(Decoder(as_target(tiny_model), {EOS}), BUDGET)
    drafter = methods.get("pld").create(MethodContext(tiny_model, None, budget=BUDGET))
    batch.join("a", drafter, PROMPTS[0], 8)
    with pytest.raises(ValueError, match="own drafter"):
        batch.join("b", drafter, PROMPTS[1], 8)
    with pytest.raises(ValueError, match="already has key"):
        batch.join("a", methods.get("pld").create(MethodContext(tiny_model, None, budget=BUDGET)), PROMPTS[1], 8)
