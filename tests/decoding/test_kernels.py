"""The lean forward's matrix-product kernels: every candidate computes x @ w.T, the plan picks
the fastest per bucket within its memory cap, plans round-trip and are cached per machine, the
cost curve re-times spikes, and the roofline's floor is the larger of its two limits."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.tiny import make_model

from specbench_cli.targets.hf.forward import kernels as k
from specbench_cli.targets.hf.forward import lean
from specbench_cli.targets.hf.forward.short import register as register_short

CPU_KERNELS = k.available(torch.float32)


def test_the_cpu_build_offers_the_packed_kernels_the_plan_measures():
    # the CI torch (2.13.0 CPU) has MKL and oneDNN: if one vanished, auto would silently measure less
    assert {"mkl", "mkl-t", "onednn", "onednn-packed", "mkl-packed"} <= set(CPU_KERNELS)
    assert "mkl-packed" not in k.available(torch.bfloat16) and "onednn-packed" in k.available(torch.bfloat16)


@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize("q", [1, 3, 10, 17, 130])
def test_every_kernel_multiplies_like_f_linear(kernel, q):
    gen = torch.Generator().manual_seed(q)
    w = torch.randn(48, 32, generator=gen)
    x = torch.randn(1, q, 32, generator=gen)
    lin = k.PlannedLinear(w, [kernel] * (len(k.BUCKETS) + 1))
    torch.testing.assert_close(lin(x), torch.nn.functional.linear(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", k.available(torch.bfloat16))
def test_bfloat16_kernels_multiply_like_f_linear(kernel):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 32, generator=gen).bfloat16()
    x = torch.randn(1, 5, 32, generator=gen).bfloat16()
    lin = k.PlannedLinear(w, [kernel] * (len(k.BUCKETS) + 1))
    torch.testing.assert_close(lin(x).float(), torch.nn.functional.linear(x, w).float(), rtol=2e-2, atol=2e-2)


def test_a_plan_dispatches_each_row_count_to_its_buckets_kernel():
    w = torch.randn(8, 4)
    names = ["mkl", "mkl-t", "onednn", "onednn-packed", "mkl-packed", "mkl-wx", "mkl-t", "onednn", "mkl"]
    lin = k.PlannedLinear(w, names)
    for (lo, hi), name in zip(k.BUCKETS, names):
        for q in (lo, hi):
            assert lin.kernels[next(i for i, (a, b) in enumerate(k.BUCKETS) if a <= q <= b)] == name
            torch.testing.assert_close(lin(torch.ones(1, q, 4)), torch.ones(1, q, 4) @ w.T, rtol=1e-5, atol=1e-5)
    assert lin(torch.ones(1, 300, 4)).shape == (1, 300, 8)  # prefill: past the last bucket


def _timing(**rows):
    return {name: list(v) for name, v in rows.items()}


def test_choose_takes_the_fastest_kernel_per_bucket():
    n = len(k.BUCKETS) + 1
    t = _timing(**{"mkl": [1.0] * n, "onednn": [2.0] * n, "onednn-packed": [0.5] + [3.0] * (n - 1)})
    assert k.choose(t, max_forms=2) == ["onednn-packed"] + ["mkl"] * (n - 1)


def test_choose_drops_the_least_useful_weight_form_past_the_cap():
    n = len(k.BUCKETS) + 1
    packed = [5.0, 5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0, None]  # mkl-packed@M wins four buckets: four forms
    t = _timing(**{"mkl": [2.0] * n, "onednn-packed": [1.5] * n, "mkl-packed": packed, "mkl-t": [1.0] + [9.0] * (n - 1)})
    picks = k.choose(t, max_forms=2)
    forms = {k.form_of(name, hi) for name, hi in zip(picks, [b for _, b in k.BUCKETS] + [k.PREFILL_M])} - {"plain"}
    assert len(forms) <= 2
    # with room for all six forms (t, onednn, mkl@16..128) every bucket gets its own best kernel
    assert k.choose(t, max_forms=6) == ["mkl-t", "onednn-packed", "onednn-packed", "onednn-packed",
                                        "mkl-packed", "mkl-packed", "mkl-packed", "mkl-packed", "onednn-packed"]


def test_a_plan_round_trips_and_a_damaged_one_is_refused():
    plan = k.Plan(choices={"8x4": ["mkl"] * (len(k.BUCKETS) + 1)}, key={"cpu": "x"})
    again = k.Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.choices == plan.choices and again.key == plan.key
    bad = plan.to_dict() | {"choices": {"8x4": ["bogus"] * (len(k.BUCKETS) + 1)}}
    with pytest.raises(ValueError):
        k.Plan.from_dict(bad)
    with pytest.raises(ValueError):
        k.Plan.from_dict(plan.to_dict() | {"buckets": [[1, 1]]})


def test_calibrate_measures_every_shape_and_candidate_of_the_model():
    model = make_model(0)
    register_short()
    model.set_attn_implementation("short")
    lean.install(model)
    groups = lean.weight_groups(model)
    assert set(groups) == {"64x32", "32x32", "128x32", "32x64"}  # qkv (4+2+2 heads x 8), o, gate_up, down; head 128x32
    plan = k.calibrate(groups, rounds=1)
    assert set(plan.choices) == set(groups)
    for shape, t in plan.timings.items():
        assert set(t) == set(CPU_KERNELS)
        assert all(v > 0 for name, row in t.items() for v in row if v is not None)
        assert t["mkl-packed"][-1] is None  # packed for one M: never the prefill's kernel


def test_lean_with_any_plan_gives_sdpa_logits():
    ref = make_model(0)
    fast = make_model(0)
    register_short()
    fast.set_attn_implementation("short")
    lean.install(fast)
    ids = torch.tensor([[2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14, 40, 41, 42]])
    with torch.inference_mode():
        want = ref(input_ids=ids).logits
        for kernel in CPU_KERNELS:
            lean.install(fast, k.Plan(fixed=kernel))
            torch.testing.assert_close(fast(input_ids=ids).logits, want, rtol=1e-4, atol=1e-4)


def test_plan_for_calibrates_once_then_reads_the_cache(tmp_path, monkeypatch, isolated_cache):
    from specbench_cli.targets.hf import kernel_plan

    model = make_model(0)
    register_short()
    model.set_attn_implementation("short")
    lean.install(model)
    notes = []
    first = kernel_plan.plan_for(model, "auto", "float32", isolated_cache, note=notes.append)
    assert notes and list(isolated_cache.glob("kernels/*.json"))
    monkeypatch.setattr(k, "calibrate", lambda *a, **kw: pytest.fail("calibrated again despite a cached plan"))
    second = kernel_plan.plan_for(model, "auto", "float32", isolated_cache, note=notes.append)
    assert second.choices == first.choices and len(notes) == 1
    assert kernel_plan.plan_for(model, "onednn", "float32", isolated_cache).fixed == "onednn"


def test_a_damaged_cached_plan_is_measured_again(isolated_cache, monkeypatch):
    from specbench_cli.targets.hf import kernel_plan

    model = make_model(0)
    register_short()
    model.set_attn_implementation("short")
    lean.install(model)
    kernel_plan.plan_for(model, "auto", "float32", isolated_cache)
    (path,) = isolated_cache.glob("kernels/*.json")
    path.write_text("{not json", encoding="utf-8")
    calls = []
    real = k.calibrate
    monkeypatch.setattr(k, "calibrate", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    kernel_plan.plan_for(model, "auto", "float32", isolated_cache)
    assert calls == [1] and json.loads(path.read_text(encoding="utf-8"))["choices"]


def test_spikes_are_timed_again_before_a_curve_is_kept():
    from specbench_cli.run.auto.cost import remeasure_spikes, spikes

    assert spikes([10.0, 11.0, 30.0, 12.0, 13.0]) == [3]
    samples = {1: [10.0], 2: [11.0], 3: [30.0], 4: [12.0], 5: [13.0]}
    timed = []
    honest = {1: 10.0, 2: 11.0, 3: 11.5, 4: 12.0, 5: 13.0}
    assert remeasure_spikes(samples, lambda q: timed.append(q) or honest[q], rounds=3) == [3]
    assert sorted(set(timed)) == [3, 4] and samples[3] == [11.5] * 3
    # a spike that survives every pass is kept (it is real) and reported
    stubborn = {1: [10.0], 2: [30.0], 3: [11.0]}
    assert remeasure_spikes(stubborn, lambda q: 30.0 if q == 2 else 11.0, rounds=1) == [2]


def test_the_floor_is_the_larger_of_bandwidth_and_arithmetic():
    from specbench_cli.run.auto.roofline import Roofline, model_sizes

    roof = Roofline(bandwidth_gbs=10.0, peak_gflops=100.0, weight_bytes=10**9, matmul_params=250_000_000,
                    kv_bytes_per_token=0, attn_flops_per_pair=0, context=0)
    assert roof.floor_ms(1) == pytest.approx(100.0) and roof.bound(1) == "bandwidth"  # 1 GB at 10 GB/s
    assert roof.floor_ms(40) == pytest.approx(200.0) and roof.bound(40) == "compute"  # 20 GFLOP at 100 GFLOP/s
    tied = make_model(0, tie=True)
    sizes = model_sizes(tied)
    per_layer = 32 * 32 * 2 + 2 * 16 * 32 + 3 * 64 * 32  # q, o; k, v (2 kv heads x 8); gate, up, down
    assert sizes["matmul_params"] == 2 * per_layer + 128 * 32  # the tied head counted once
    assert sizes["kv_bytes_per_token"] == 2 * 2 * 2 * 8 * 4


def test_attention_is_timed_per_bucket_and_either_choice_gives_sdpa_logits():
    from specbench_cli.targets.hf.kv import KVCache

    choices, times = k.calibrate_attention(heads=4, kv_heads=2, head_dim=8, layers=2, dtype=torch.float32,
                                           context=20, rounds=1)
    assert len(choices) == len(k.BUCKETS) + 1 and set(choices) <= set(k.ATTENTION)
    assert all(len(v) == len(choices) and all(t > 0 for t in v) for v in times.values())
    ref, fast = make_model(0), make_model(0)
    register_short()
    fast.set_attn_implementation("short")
    lean.install(fast)
    prompt = torch.tensor([[2, 5, 9, 14, 7, 3, 2, 6, 30, 31]])
    block = torch.tensor([[32, 33, 9, 14, 40, 41, 42, 40, 41, 42, 11, 12]])
    with torch.inference_mode():
        cache = KVCache()
        ref(input_ids=prompt, past_key_values=cache.hf, use_cache=True)
        want = ref(input_ids=block, past_key_values=cache.hf, use_cache=True).logits
        for name in k.ATTENTION:
            lean.install(fast, k.Plan(fixed="mkl", attention=[name] * (len(k.BUCKETS) + 1)))
            cache = KVCache()
            fast(input_ids=prompt, past_key_values=cache.hf, use_cache=True)
            got = fast(input_ids=block, past_key_values=cache.hf, use_cache=True).logits  # causal block after a cache
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
