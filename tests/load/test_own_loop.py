"""specbench's own loop under load (load/own_loop.py) on the embedded model (SmolLM2-135M,
float32, greedy): requests that join a running batch as others leave (continuous batching,
three in flight, caps that end them at different steps, a warm-up request first) get, request by request, the tokens of
the same prompts decoded as one static batch (`generate_batch`) and alone with AR, for every
registered lossless method (those needing an artifact the embedded model lacks are skipped:
trained heads, a draft model, a datastore, a mask token); what each record holds (streamed
token times, per-step batch sizes, acceptance counts) is consistent with its answer, and an open
loop of staggered arrivals records the same tokens. Slow, marked."""

from __future__ import annotations

import pytest
from helpers.embedded import needs_model

from specbench_cli import methods
from specbench_cli.config.fields import RunConfig
from specbench_cli.config.instance import parse_instance
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.run.replicas import replicas
from specbench_cli.store.load import LoadPoint, TraceRequest

pytestmark = [pytest.mark.slow, needs_model]

QUESTIONS = ("s1", "t1", "q1", "s1")  # mixed lengths; a prompt twice (two requests, one answer)
CAPS = (16, 11, 7, 13)                # requests leave at different steps: the fourth joins mid-flight
BUDGET = 10


def _params():
    out = []
    for name in methods.names():
        spec = methods.get(name)
        if not spec.lossless:
            continue
        lacks = [r for r in spec.requires] + (["trained weights"] if spec.needs_training and not spec.requires else [])
        out.append(pytest.param(name, marks=pytest.mark.skip(reason=f"{name} needs {', '.join(lacks)}")) if lacks
                   else name)
    return out


@pytest.fixture(scope="module")
def smol():
    from specbench_cli.models.load import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="module")
def trace(smol):
    from specbench_cli import tasks
    from specbench_cli.models.prompting import ChatPrompter, user_turn

    prompter = ChatPrompter(smol.tokenizer)
    qs = {q.id: q for q in tasks.get("mini").load()}
    return [TraceRequest(i, qid, qs[qid].category, 0, tuple(prompter(user_turn(qs[qid].turns[0]))), cap, None)
            for i, (qid, cap) in enumerate(zip(QUESTIONS, CAPS))]


@pytest.fixture(scope="module")
def decoder(smol):
    from specbench_cli.models.prompting import stop_token_ids

    return Decoder(smol.target, stop_token_ids(smol.tokenizer, smol.target))


@pytest.fixture(scope="module")
def alone(smol, trace, decoder):
    """AR's answer to each request, decoded alone (a batch of one)."""
    ar = methods.get("ar").create(MethodContext(smol.target, smol.tokenizer, budget=BUDGET))
    return [decoder.generate(ar, list(r.prompt_ids), r.max_new_tokens, BUDGET).output_ids for r in trace]


def serve(smol, name: str, point: LoadPoint, trace) -> dict[int, object]:
    from specbench_cli.load.own_loop import OwnLoopBackend

    backend = OwnLoopBackend(RunConfig.from_flat({"block_complexity": BUDGET}), parse_instance(name), smol)
    records = []
    backend.start()
    try:
        backend.serve(point, trace, records.append)
    finally:
        backend.stop()
    assert sorted(r.index for r in records) == [r.index for r in trace if r.index >= 0]
    return {r.index: r for r in records}


@pytest.mark.parametrize("name", _params())
def test_continuous_batching_is_lossless_against_static_batches_and_ar(smol, trace, decoder, alone, name):
    ctx = MethodContext(smol.target, smol.tokenizer, budget=BUDGET)
    method = methods.get(name).create(ctx)
    if method.reference_drafts:  # synthetic drafts from AR's answer
        for r, ref in zip(trace, alone):
            method.refer(list(r.prompt_ids), ref)
    copies = replicas(method, len(trace), lambda: methods.get(name).create(ctx))
    static = decoder.generate_batch(copies, [list(r.prompt_ids) for r in trace], [r.max_new_tokens for r in trace],
                                    BUDGET)
    got = serve(smol, name, LoadPoint("concurrency", 3, len(trace), 600.0, warmup=1),
                [TraceRequest(-1, "w", "w", 0, trace[1].prompt_ids, 4, None), *trace])
    accepted, static_accepted = 0, sum(sum(g.accept_lengths) - g.steps for g in static)
    for r, st, ref in zip(trace, static, alone):
        rec = got[r.index]
        assert rec.error is None, rec.error
        assert rec.output_ids == st.output_ids == ref, f"{name}: request {r.index} ({r.question_id}) differs"
        assert rec.method == name and rec.speculative == (name != "ar") and rec.acceptance_source == "loop"
        assert len(rec.token_times_s) == rec.new_tokens == len(rec.output_ids)
        assert rec.send_s <= rec.first_token_s == rec.token_times_s[0] <= rec.token_times_s[-1] == rec.end_s
        assert rec.token_times_s == sorted(rec.token_times_s)
        assert rec.steps == len(rec.accept_lengths) == len(rec.batch_sizes) == len(rec.draft_path_lengths)
        assert sum(rec.accept_lengths) == rec.new_tokens - 1  # the first token comes from the prefill
        assert 1 <= max(rec.batch_sizes) <= 3
        assert rec.accepted == sum(a - 1 for a in rec.accept_lengths) <= rec.drafted
        assert rec.accepted_by_position == sorted(rec.accepted_by_position, reverse=True)
        assert all(a <= d for a, d in zip(rec.accepted_by_position, rec.drafted_by_position))
        accepted += rec.accepted
    assert max(max(got[r.index].batch_sizes) for r in trace) == 3  # three were in flight together
    if static_accepted:  # drafts get accepted under load where they did in a static batch
        assert accepted > 0, f"{name}: no draft token accepted under load"
    if method.reference_drafts:
        assert accepted > 0


@pytest.mark.parametrize("name", ["pld", "synthetic"])
def test_an_open_loop_of_staggered_arrivals_records_the_same_tokens(smol, trace, alone, name):
    """Arrivals 0.15 s apart join whatever step is running; synthetic finds its references on its
    own (AR in static batches, before the point's clock starts)."""
    staggered = [TraceRequest(r.index, r.question_id, r.category, r.turn, r.prompt_ids, r.max_new_tokens, 0.15 * i)
                 for i, r in enumerate(trace)]
    got = serve(smol, name, LoadPoint("rate", 6.0, len(trace), 600.0), staggered)
    for r, ref in zip(staggered, alone):
        rec = got[r.index]
        assert rec.output_ids == ref and rec.send_s == r.send_s <= rec.first_token_s
    if name == "synthetic":
        assert sum(rec.accepted for rec in got.values()) > 0
