"""Every cache is validated when read: cost curves and kernel plans (one keyed JSON cache,
json_cache.py) and converted models. Anything invalid is measured or built again with one
warning line, never used and never a crash; a cache folder that cannot be written (read-only,
full, not a folder) is one warning and the run goes on without the cache."""

from __future__ import annotations

import errno
import json
import math

import pytest

from specbench_cli import json_cache
from specbench_cli.run.auto import cost


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test starts with no cache root warned about (the warning is once per process)."""
    monkeypatch.setattr(json_cache, "_UNWRITABLE", set())


# ----------------------------------------------------------------------------- cost curves

CURVE_KEY = {"model": "m", "device": "cpu", "dtype": "float32", "threads": 2, "context": 400}


def _good_curve() -> dict:
    return cost.CostCurve(ms=[10.0, 11.0, 12.5], key=CURVE_KEY, rounds=3, spread=[0.1, 0.0, 0.2],
                          remeasured=[2]).to_dict()


CURVE_DAMAGE = {
    "rounds Infinity": lambda t: t.replace('"rounds": 3', '"rounds": Infinity'),
    "ms Infinity": lambda t: t.replace("10.0", "Infinity"),
    "ms NaN": lambda t: t.replace("10.0", "NaN"),
    "ms true": lambda t: t.replace("10.0", "true"),
    "ms 1e400": lambda t: t.replace("10.0", "1e400"),
    "rounds text": lambda t: t.replace('"rounds": 3', '"rounds": "3"'),
    "spread negative": lambda t: t.replace("0.2", "-0.2"),
    "remeasured past the curve": lambda t: t.replace('"remeasured": [\n  2\n ]', '"remeasured": [99]'),
    "roofline zero bandwidth": lambda t: t.replace('"roofline": null', '"roofline": {"bandwidth_gbs": 0}'),
    "a list": lambda t: "[1, 2]",
    "nested 100,000 deep": lambda t: "[" * 100_000 + "]" * 100_000,
    "not UTF-8": lambda t: t.replace("m", "\udcff"),
    "another key": lambda t: t.replace('"threads": 2', '"threads": 3'),
}


@pytest.mark.parametrize("damage", CURVE_DAMAGE, ids=list(CURVE_DAMAGE))
def test_a_damaged_cost_curve_is_one_warning_and_measured_again(isolated_cache, damage):
    path = cost.cache_path(CURVE_KEY)
    path.parent.mkdir(parents=True)
    text = CURVE_DAMAGE[damage](json.dumps(_good_curve(), indent=1))
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert text != json.dumps(_good_curve(), indent=1)
    said = []
    assert cost.CACHE.load(CURVE_KEY, isolated_cache, said.append) is None
    assert len(said) == 1 and str(path) in said[0] and said[0].endswith("measuring it again"), said


def test_a_valid_cost_curve_round_trips(isolated_cache):
    cost.save_cached(cost.CostCurve.from_dict(_good_curve()))
    curve = cost.load_cached(CURVE_KEY)
    assert curve.ms == [10.0, 11.0, 12.5] and curve.remeasured == [2] and all(math.isfinite(x) for x in curve.ms)


# ----------------------------------------------------------------------------- kernel plans


def _good_plan() -> tuple[dict, dict]:
    import torch

    from specbench_cli.targets.hf.forward.kernels import BUCKETS, Plan, available
    from specbench_cli.targets.hf.kernel_plan import plan_key

    kernel = available(torch.float32)[0]
    key = plan_key({"64x32": [torch.zeros(64, 32)], "32x32": [torch.zeros(32, 32)] * 2}, "float32", 2)
    plan = Plan(choices={s: [kernel] * (len(BUCKETS) + 1) for s in ("64x32", "32x32")}, key=key,
                measured_at="now", loadavg=[0.5, 0.4, 0.3])
    return key, plan.to_dict()


PLAN_DAMAGE = {
    "unknown fixed kernel": lambda d: {**d, "fixed": "turbo"},
    "a fixed kernel at all": lambda d: {**d, "fixed": "mkl"},
    "a list": lambda d: [d],
    "max_forms Infinity": lambda d: {**d, "max_forms": float("inf")},
    "max_forms zero": lambda d: {**d, "max_forms": 0},
    "a missing shape": lambda d: {**d, "choices": {"64x32": d["choices"]["64x32"]}},
    "an extra shape": lambda d: {**d, "choices": {**d["choices"], "7x7": d["choices"]["64x32"]}},
    "an unknown kernel": lambda d: {**d, "choices": {s: ["turbo"] * len(v) for s, v in d["choices"].items()}},
    "loadavg text": lambda d: {**d, "loadavg": ["high"]},
    "timings a list": lambda d: {**d, "timings": []},
    "other buckets": lambda d: {**d, "buckets": [[1, 1]]},
}


@pytest.mark.parametrize("damage", PLAN_DAMAGE, ids=list(PLAN_DAMAGE))
def test_a_damaged_kernel_plan_is_one_warning_and_timed_again(tmp_path, damage):
    from specbench_cli.targets.hf import kernel_plan

    key, doc = _good_plan()
    path = kernel_plan.plan_path(key, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(PLAN_DAMAGE[damage](doc)))  # Infinity as JSON writes it
    said = []
    assert kernel_plan.CACHE.load(key, tmp_path, said.append) is None
    assert len(said) == 1 and str(path) in said[0] and said[0].endswith("timing the kernels again"), said


def test_a_valid_kernel_plan_round_trips(tmp_path):
    from specbench_cli.targets.hf import kernel_plan

    key, doc = _good_plan()
    said = []
    kernel_plan.CACHE.save(kernel_plan.plan_from_document(doc), tmp_path, said.append)
    assert kernel_plan.CACHE.load(key, tmp_path, said.append).choices == doc["choices"] and not said


def test_plan_for_times_again_after_a_damaged_plan_and_runs_on(tmp_path, monkeypatch):
    """Through the real entry point: the damaged plan of a real model is replaced, not used."""
    from helpers.tiny import make_model

    from specbench_cli.targets.hf import kernel_plan
    from specbench_cli.targets.hf.forward import kernels as k
    from specbench_cli.targets.hf.forward import lean
    from specbench_cli.targets.hf.forward.short import register

    model = make_model(0)
    register()
    model.set_attn_implementation("short")
    lean.install(model)
    kernel_plan.plan_for(model, "auto", "float32", tmp_path)
    (path,) = tmp_path.glob("kernels/*.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "fixed": "turbo"}))
    said, calls, real = [], [], k.calibrate
    monkeypatch.setattr(json_cache, "warn", said.append)
    monkeypatch.setattr(k, "calibrate", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    plan = kernel_plan.plan_for(model, "auto", "float32", tmp_path)
    assert calls == [1] and plan.fixed is None and len(said) == 1
    assert json.loads(path.read_text())["fixed"] is None


# ----------------------------------------------------------------------------- caches that cannot be written


def test_a_cache_that_cannot_be_written_is_one_warning_and_the_value_is_still_used(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SPECBENCH_CACHE", str(blocker / "cache"))  # ENOTDIR, as for a read-only folder
    said = []
    monkeypatch.setattr(json_cache, "warn", said.append)
    curve = cost.CostCurve.from_dict(_good_curve())
    assert cost.save_cached(curve) is None and cost.save_cached(curve) is None
    assert cost.load_cached(CURVE_KEY) is None
    assert len(said) == 1 and "cannot write the cache under" in said[0] and "going on without it" in said[0]


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_a_read_only_or_full_cache_folder_is_one_warning(tmp_path, monkeypatch, code):
    def refuse(*a, **k):
        raise OSError(code, "cannot write")

    monkeypatch.setattr(json_cache, "atomic_write", refuse)
    said = []
    assert cost.CACHE.save(cost.CostCurve.from_dict(_good_curve()), tmp_path, said.append) is None
    assert len(said) == 1 and "cannot write" in said[0]


def test_a_model_cache_that_cannot_be_written_builds_outside_it_with_one_warning(tmp_path, monkeypatch):
    from specbench_cli.models.cache import ensure_entry

    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    said = []
    entry = ensure_entry(blocker / "models" / "m", lambda d: (d / "config.json").write_text("{}"), say=said.append)
    assert (entry / "config.json").read_text() == "{}" and not str(entry).startswith(str(blocker))
    assert len(said) == 1 and said[0].startswith("warning: cannot write the cache under")


def test_a_damaged_model_cache_record_is_rebuilt_never_a_crash(tmp_path):
    from specbench_cli.models.cache import RECORD, ensure_entry, problem

    build = lambda d: (d / "config.json").write_text("{}")  # noqa: E731
    entry = ensure_entry(tmp_path / "m", build)
    for damage in ("[" * 100_000 + "]" * 100_000, b"\xff\xfe", '{"files": []}'):
        (entry / RECORD).write_bytes(damage if isinstance(damage, bytes) else damage.encode())
        assert problem(entry) is not None
        said = []
        assert problem(ensure_entry(entry, build, say=said.append)) is None and len(said) == 1
