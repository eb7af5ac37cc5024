"""Batch size N: the batch cache keeps each sequence's own slots, the batch mask gives each row
its own cache span, tree and positions, and a batch decodes every sequence as batch size 1 does:
finished sequences leave without touching the others, sampling uses each sequence's own stream,
a lossy drafter's epilogue runs on its own sequence, and a drafter over budget is refused."""

from __future__ import annotations

import pytest
import torch
from helpers.tiny import EOS, make_model, make_tokenizer

from specbench_cli import methods
from specbench_cli.decoding.decoder import BudgetExceeded, Decoder
from specbench_cli.decoding.draft import Draft, batch_tree_inputs
from specbench_cli.decoding.drafter import Drafter
from specbench_cli.decoding.verify import SamplingConfig
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target
from specbench_cli.targets.hf.kv import BatchKVCache, KVCache

PROMPTS = [[2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14], [2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 77],
           [2, 8, 9, 10, 11, 12, 13]]


def _single(length: int, value: float, layers: int = 2) -> KVCache:
    """A batch-1 cache whose slot s holds `value + s` in every key/value entry."""
    cache = KVCache()
    for layer in range(layers):
        k = (value + torch.arange(length, dtype=torch.float32)).view(1, 1, length, 1).expand(1, 2, length, 3)
        cache.hf.update(k.clone(), k.clone(), layer)
    return cache


def _slots(cache: BatchKVCache, row: int) -> list[float]:
    layer = cache.hf.layers[0]
    return layer._k[row, 0, cache.starts[row]:cache.ends[row], 0].tolist()


def test_batch_cache_keeps_each_rows_accepted_slots_packed_after_its_own_end():
    cache = BatchKVCache(2, 16)
    cache.load_row(0, _single(3, 100.0), 5)  # row 0: 3 prompt slots ending at 5
    cache.load_row(1, _single(5, 200.0), 5)
    assert cache.starts == [2, 0] and cache.ends == [5, 5] and cache.length == 5
    assert _slots(cache, 0) == [100.0, 101.0, 102.0]
    # a forward writes 4 new slots per row at slot 5 (values 1000+ for row 0, 2000+ for row 1)
    for layer in cache.hf.layers:
        new = torch.stack([1000 + torch.arange(4.0), 2000 + torch.arange(4.0)]).view(2, 1, 4, 1).expand(2, 2, 4, 3)
        layer.update(new.clone(), new.clone())
    cache.keep(5, [[0, 2], [0, 1, 3]])
    assert cache.ends == [7, 8] and cache.length == 8
    assert _slots(cache, 0) == [100.0, 101.0, 102.0, 1000.0, 1002.0]
    assert _slots(cache, 1) == [200.0, 201.0, 202.0, 203.0, 204.0, 2000.0, 2001.0, 2003.0]
    assert cache.hf.layers[1]._v[1, 1, 7, 2].item() == 2003.0  # every layer, head and value entry moved
    # row 0 leaves: row 1 takes its place, unchanged
    cache.drop(0)
    assert cache.rows == 1 and cache.hf.layers[0].keys.shape[0] == 1
    assert _slots(cache, 0) == [200.0, 201.0, 202.0, 203.0, 204.0, 2000.0, 2001.0, 2003.0]
    single = cache.extract(0)
    assert single.length == 8 and single.hf.layers[0].keys[0, 0, :, 0].tolist()[-1] == 2003.0


def test_batch_mask_gives_each_row_its_cached_span_its_tree_and_its_positions():
    low = torch.finfo(torch.float32).min
    mask, pos = batch_tree_inputs([[-1, 0, -1], []], starts=[2, 0], ends=[5, 4], past=5, q=4,
                                  dtype=torch.float32, device="cpu")
    assert mask.shape == (2, 1, 4, 9) and pos.shape == (2, 4)
    seen = mask[:, 0] == 0
    # sequence 0: cached slots 2..4; root, node 0 (under root), node 1 (under node 0), node 2 (under root)
    assert seen[0, :, :5].tolist() == [[False, False, True, True, True]] * 4
    assert seen[0, :, 5:].tolist() == [[True, False, False, False], [True, True, False, False],
                                       [True, True, True, False], [True, False, False, True]]
    assert pos[0].tolist() == [3, 4, 5, 4]
    # sequence 1: no draft; cached slots 0..3 (slot 4 is a gap another sequence wrote); padding rows see only themselves
    assert seen[1, 0, :5].tolist() == [True, True, True, True, False]
    assert seen[1, :, 5:].tolist() == [[True, False, False, False], [False, True, False, False],
                                       [False, False, True, False], [False, False, False, True]]
    assert pos[1].tolist() == [4, 4, 4, 4]
    assert mask[1, 0, 0, 4].item() == low


@pytest.fixture(scope="module")
def tiny():
    return make_model(0), make_tokenizer()


def _ar_outputs(model, tok, prompts, caps, budget=1):
    dec = Decoder(as_target(model), {EOS})
    ar = methods.get("ar").create(MethodContext(model, tok, budget=budget))
    return [dec.generate(ar, p, c, budget).output_ids for p, c in zip(prompts, caps)]


def test_a_sequence_that_finishes_early_leaves_the_others_tokens_as_they_were(tiny):
    """Row isolation: a short cap, a different neighbour or no neighbour at all changes nothing
    in a sequence's tokens (on this model batched arithmetic also matches batch size 1 exactly;
    the reports measure that on real models instead of assuming it)."""
    model, tok = tiny
    dec = Decoder(as_target(model), {EOS})
    ctx = MethodContext(model, tok, budget=10)
    alone = _ar_outputs(model, tok, PROMPTS, [40] * 4)
    got = dec.generate_batch([methods.get("pld").create(ctx) for _ in PROMPTS], PROMPTS, [3, 40, 40, 1], 10)
    assert [g.output_ids for g in got] == [alone[0][:3], alone[1], alone[2], alone[3][:1]]
    assert got[3].steps == 0 and got[0].steps >= 1
    assert got[0].wall_time < got[1].wall_time  # it left the batch before the others finished
    assert all(g.prefill_time == got[0].prefill_time for g in got)  # decoding starts after every prefill


def test_every_sequence_samples_from_its_own_stream(tiny):
    model, tok = tiny
    sampling = SamplingConfig(temperature=1.0)
    single, batch = Decoder(as_target(model), {EOS}, sampling), Decoder(as_target(model), {EOS}, sampling)
    ctx = MethodContext(model, tok, budget=6, sampling=sampling)
    want = [single.generate(methods.get("pld").create(ctx), p, 24, 6, torch.Generator().manual_seed(i)).output_ids
            for i, p in enumerate(PROMPTS)]
    got = batch.generate_batch([methods.get("pld").create(ctx) for _ in PROMPTS], PROMPTS, [24] * 4, 6,
                               [torch.Generator().manual_seed(i) for i in range(4)])
    assert [g.output_ids for g in got] == want


def test_a_lossy_drafters_epilogue_runs_on_its_own_sequence(tiny):
    model, tok = tiny
    ctx = MethodContext(model, tok, budget=6)
    options = {"max_iters": 3}
    want = [Decoder(as_target(model), {EOS}).generate(methods.get("fastcot").create(ctx, **options), p, 24, 6) for p in PROMPTS[:2]]
    got = Decoder(as_target(model), {EOS}).generate_batch([methods.get("fastcot").create(ctx, **options) for _ in range(2)],
                                                   PROMPTS[:2], [24, 24], 6)
    assert [g.output_ids for g in got] == [w.output_ids for w in want]
    assert all(g.stats and g.stats["answer_tokens"] >= 1 for g in got)


class _Greedy(Drafter):
    name = "greedy-over-budget"

    def propose(self, state):
        return Draft.chain([5] * state.budget)  # one node too many


def test_a_drafter_over_budget_is_refused_and_one_instance_per_sequence_is_required(tiny):
    model, _ = tiny
    dec = Decoder(as_target(model), {EOS})
    with pytest.raises(BudgetExceeded, match="proposed 4 tokens at block complexity 4"):
        dec.generate_batch([_Greedy(), _Greedy()], PROMPTS[:2], [8, 8], 4)
    shared = _Greedy()
    with pytest.raises(ValueError, match="its own drafter instance"):
        dec.generate_batch([shared, shared], PROMPTS[:2], [8, 8], 4)
