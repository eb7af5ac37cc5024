"""The cost curve t(q): measurement shape, cache keyed by settings, the `cost` command."""

from __future__ import annotations

import pytest
from helpers.cli import cli

from specbench_cli.run.auto import cost as c


def test_measure_curve_times_every_q_on_the_same_context(tiny_model):
    curve = c.measure_curve(tiny_model, max_q=6, context=20, rounds=3, warmup=1, key={"k": 1})
    assert curve.max_q == 6 and len(curve.spread) == 6
    assert all(ms > 0 for ms in curve.ms)
    assert curve.ratio(1) == 1.0
    assert curve.key == {"k": 1} and curve.rounds == 3


def test_curve_lookup_and_extrapolation():
    curve = c.CostCurve(ms=[10.0, 12.0, 15.0], key={}, rounds=1)
    assert curve.t(2) == 12.0 and curve.ratio(3) == 1.5
    assert curve.t(5) == 21.0  # beyond the measured range: the last slope (3 ms per token)
    with pytest.raises(ValueError):
        curve.t(0)


@pytest.mark.parametrize("bad", [{"ms": []}, {"ms": [1, -2]}, {"ms": "fast"}, {}])
def test_curve_from_bad_json_is_refused(bad):
    with pytest.raises(ValueError):
        c.CostCurve.from_dict(bad)


def test_cache_is_keyed_by_every_setting(isolated_cache):
    key = {"model": "m", "device": "cpu", "dtype": "float32", "threads": 2}
    c.save_cached(c.CostCurve(ms=[1.0, 2.0], key=key, rounds=2))
    assert c.load_cached(key).ms == [1.0, 2.0]
    assert c.load_cached({**key, "threads": 1}) is None
    c.cache_path(key).write_text("{torn")
    assert c.load_cached(key) is None  # damaged cache entry: measured again, never trusted


@pytest.mark.parametrize("args,message", [
    (["cost", "--max-q", "0"], "--max-q must be between 1 and 1024"),
    (["cost", "--repeats", "0"], "--repeats must be between 1 and 1000"),
    (["cost", "--dtype", "int3"], "unknown dtype 'int3'"),
    (["cost", "--threads", "0"], "--threads must be at least 1"),
    (["cost", "--target", "nosuch"], "unknown target 'nosuch'"),
])
def test_cost_bad_input_exits_2_before_loading(args, message, capsys, monkeypatch):
    import specbench_cli.models.load as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("model loaded before validation"))
    code, _, err = cli(args, capsys)
    assert code == 2 and message in " ".join(err.split())


def test_cost_command_measures_once_then_uses_the_cache(tiny_model_dir, isolated_cache, tmp_path, capsys,
                                                         monkeypatch):
    args = ["cost", "--model", str(tiny_model_dir), "--max-q", "4", "--repeats", "2", "--warmup", "1",
            "--context", "16", "--threads", "1", "--plot", str(tmp_path / "curve.png")]
    code, out, err = cli(args, capsys)
    assert code == 0, err
    assert "t(q)/t(1)" in out and (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setattr(c, "measure_curve", lambda *a, **k: pytest.fail("measured again despite the cache"))
    code, out, err = cli(args, capsys)
    assert code == 0 and "cached curve" in err


def test_a_batch_curve_times_n_sequences_per_forward_and_has_its_own_cache_key(tiny_model, isolated_cache):
    curve = c.measure_curve(tiny_model, max_q=3, context=12, rounds=2, warmup=1, key={"k": 2}, batch_size=3)
    assert curve.max_q == 3 and all(ms > 0 for ms in curve.ms)
    one = c.curve_key("m", "r", "cpu", "float32", 1, 400, "sdpa")
    assert "batch_size" not in one  # curves measured before batches existed keep their key
    assert c.curve_key("m", "r", "cpu", "float32", 1, 400, "sdpa", batch_size=4) == {**one, "batch_size": 4}


def test_cost_command_at_a_batch_size(tiny_model_dir, isolated_cache, tmp_path, capsys):
    args = ["cost", "--model", str(tiny_model_dir), "--max-q", "3", "--repeats", "1", "--warmup", "1",
            "--context", "8", "--threads", "1", "--batch-size", "2", "--plot", str(tmp_path / "curve.png")]
    code, out, err = cli(args, capsys)
    assert code == 0, err
    assert "2 sequences of q tokens" in " ".join(out.split())
    (cached,) = (isolated_cache / "cost").glob("*.json")
    assert '"batch_size": 2' in cached.read_text()


def test_cost_command_measures_any_registered_target(tiny_model_dir, isolated_cache, tmp_path, capsys):
    """`--target NAME` as for run: the target's own `load` and `verify`, the curve keyed by what
    computes it (the run's key), no floor (which reads a transformers model's weights)."""
    import json

    args = ["cost", "--target", "zero-cost", "--model", str(tiny_model_dir), "--max-q", "3", "--repeats", "1",
            "--warmup", "1", "--context", "8", "--threads", "1", "--plot", str(tmp_path / "curve.png"),
            "--json", str(tmp_path / "curve.json")]
    code, out, err = cli(args, capsys)
    assert code == 0, err
    assert "forward zero-cost" in " ".join(out.split()) and "floor" not in out
    record = json.loads((tmp_path / "curve.json").read_text())
    assert len(record["ms"]) == 3 and record["key"]["attn"] == "zero-cost" and record["kernels"] is None
    (cached,) = (isolated_cache / "cost").glob("*.json")
    assert json.loads(cached.read_text())["key"] == record["key"]
