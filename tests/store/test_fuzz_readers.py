"""Property-based fuzzing (hypothesis) of every reader of user files.

For question JSONL (jsonl/spec_bench and HumanEval), manifest.json, samples.jsonl, baselines
and sweep grids: arbitrary bytes, and arbitrary JSON (TOML for grids), either load into a valid
result or raise `UsageError` (exit 2, one line). Anything else (a TypeError, a KeyError...)
is a traceback a user would see, and fails here. A valid result must also survive what the
commands do next with it (summaries, checks, job expansion), so "valid" means usable.

Example counts are modest (the whole file takes ~30 s on the 2-core CI machine); every test
has a deadline so a hang fails instead of stalling CI.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from helpers.rows import make_row, manifest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specbench_cli.errors import UsageError  # noqa: E402

FUZZ = settings(max_examples=60, deadline=2000, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])

# any JSON value (NaN and infinities included: Python's json module reads them)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63), st.floats(allow_nan=True),
                    st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def mutated(base: dict) -> st.SearchStrategy[dict]:
    """`base` with some keys replaced by arbitrary JSON, some deleted, some added: close enough to
    valid that the checks after the first one are reached too."""
    keys = sorted(base)
    changed = st.builds(
        lambda changes, dropped, extra: {**{k: v for k, v in {**base, **changes}.items() if k not in dropped}, **extra},
        st.dictionaries(st.sampled_from(keys), json_values, max_size=2),
        st.sets(st.sampled_from(keys), max_size=1),
        st.dictionaries(st.text(max_size=6), json_values, max_size=1))
    return st.one_of(st.just(base), changed)  # the unchanged base keeps valid results among the examples


def _lines(values) -> bytes:
    return "".join(json.dumps(v) + "\n" for v in values).encode()


def usage_or(result_check, fn, *args):
    """Run fn(*args): a UsageError passes (one line, exit 2); a result must pass result_check."""
    try:
        result = fn(*args)
    except UsageError as e:
        assert str(e) and "\n" not in str(e)
        hypothesis.event(f"{fn.__name__}: refused")
        return
    hypothesis.event(f"{fn.__name__}: valid")
    result_check(result)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# ----------------------------------------------------------------------------- question files

QUESTION = {"question_id": 7, "category": "qa", "turns": ["What is 2+2?", "And 3+3?"]}


def _questions_ok(questions) -> None:
    from specbench_cli.tasks.base import select

    for q in questions:
        assert isinstance(q.id, str) and isinstance(q.category, str)
        assert q.turns and all(isinstance(t, str) and t for t in q.turns)
    select(questions, limit=1)


@FUZZ
@given(data=st.one_of(st.binary(max_size=300), st.lists(mutated(QUESTION), min_size=1, max_size=4).map(_lines),
                      st.lists(json_values, max_size=3).map(_lines)))
def test_question_jsonl_reader(folder, data):
    from specbench_cli.tasks.base import read_jsonl_questions
    from specbench_cli.tasks.spec_bench import SpecBench

    path = folder / "q.jsonl"
    path.write_bytes(data)
    usage_or(_questions_ok, read_jsonl_questions, path, "jsonl")
    usage_or(_questions_ok, SpecBench.load, str(path))


@settings(FUZZ, max_examples=150)
@given(data=st.one_of(st.binary(max_size=300),
                      st.lists(mutated({"task_id": "HumanEval/0", "prompt": "def f():\n"}), min_size=1,
                               max_size=3).map(_lines)),
       gz=st.booleans())
def test_humaneval_reader(folder, data, gz):
    import gzip

    from specbench_cli.tasks.humaneval import _read

    path = folder / ("he.jsonl.gz" if gz else "he.jsonl")
    path.write_bytes(gzip.compress(data) if gz and data[:1] != b"\x00" else data)
    usage_or(_questions_ok, _read, path)


# ----------------------------------------------------------------------------- run folders

GOOD_ROWS = [make_row("ar", 1, [1, 1, 1], 0.3), make_row("pld", 1, [2, 1], 0.2, draft_sizes=[3, 3]),
             make_row("ar", 2, [1, 1], 0.2, category="rag"), make_row("pld", 2, [3], 0.1, category="rag")]


def _run_usable(run) -> None:
    """What report/check/compare/export do with a loaded run must work."""
    from specbench_cli.report import metrics
    from specbench_cli.report.export import spec_bench_answers
    from specbench_cli.store.runfolder import all_rows

    assert isinstance(run.run_id, str) and isinstance(run.model_name, str)
    assert run.model_params is None or isinstance(run.model_params, int)
    rows = all_rows([run])
    summary = metrics.summarize(rows)
    assert not summary.empty or not rows or all(r["status"] != "ok" for r in rows) or summary is not None
    if rows:
        spec_bench_answers(rows)


@FUZZ
@given(doc=st.one_of(mutated(manifest()), json_values), config=st.one_of(st.none(), mutated(manifest()["config"])))
def test_manifest_reader(folder, doc, config):
    from specbench_cli.config import config_from_manifest
    from specbench_cli.store.runfolder import load_run

    run_dir = folder / "run_m"
    run_dir.mkdir(exist_ok=True)
    if isinstance(doc, dict) and config is not None:
        doc = {**doc, "config": config}
    (run_dir / "manifest.json").write_text(json.dumps(doc))
    (run_dir / "samples.jsonl").write_bytes(_lines(GOOD_ROWS))
    usage_or(_run_usable, load_run, run_dir)
    if isinstance(doc, dict):
        def _validates(cfg):
            try:
                cfg.validate()
            except UsageError:
                pass
        usage_or(_validates, config_from_manifest, doc, "manifest.json")


@settings(FUZZ, max_examples=120)
@given(rows=st.lists(st.one_of(st.sampled_from(GOOD_ROWS).flatmap(mutated), json_values), min_size=1, max_size=5),
       raw=st.one_of(st.none(), st.binary(max_size=200)))
def test_samples_reader(folder, rows, raw):
    from specbench_cli.store.runfolder import load_run

    run_dir = folder / "run_s"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest()))
    (run_dir / "samples.jsonl").write_bytes(raw if raw is not None else _lines(GOOD_ROWS + rows))
    usage_or(_run_usable, load_run, run_dir)


# ----------------------------------------------------------------------------- baselines

ENTRY = {"model": "smollm2-135m", "method_label": "pld", "block_complexity": 8, "category": "qa", "mat": 2.0,
         "speedup": 1.2, "n": 1}


@FUZZ
@given(doc=st.one_of(st.builds(lambda entries, settings_: {"format": "specbench-baseline", "version": 1,
                                                           "entries": entries, "settings": settings_},
                               st.lists(mutated(ENTRY), max_size=3),
                               st.one_of(st.none(), json_values)),
                     json_values),
       raw=st.one_of(st.none(), st.none(), st.binary(max_size=100)))
def test_baseline_reader(folder, doc, raw):
    from specbench_cli.report import metrics
    from specbench_cli.report.baseline import check_entries, mismatches, read_baseline
    from specbench_cli.store.runfolder import all_rows, load_run

    path = folder / "baseline.json"
    path.write_bytes(raw if raw is not None else json.dumps(doc).encode())
    run_dir = folder / "run_b"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest()))
    (run_dir / "samples.jsonl").write_bytes(_lines(GOOD_ROWS))
    run = load_run(run_dir)
    rows = all_rows([run])
    summary = metrics.summarize(rows)

    def _checks(baseline):
        assert baseline["entries"]
        found = mismatches(baseline, run, rows)
        assert all(isinstance(x, str) for x in found)
        for rec in check_entries(summary, baseline["entries"], 0.02, 0.25):
            assert isinstance(rec["regression"], bool)

    usage_or(_checks, read_baseline, path)


# ----------------------------------------------------------------------------- sweep grids

toml_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)  # TOML has no lone surrogates
toml_scalars = st.one_of(st.booleans(), st.integers(-5, 200), st.floats(allow_nan=False, allow_infinity=False),
                         toml_text)
toml_values = st.one_of(toml_scalars, st.lists(toml_scalars, max_size=3),
                        st.lists(st.lists(toml_text, max_size=2), max_size=2))
GRID_KEYS = ["models", "methods", "bcs", "dtypes", "tasks", "categories", "shard", "limit", "repeats",
             "max_new_tokens", "threads", "questions", "device", "seed"]


def _toml(doc: dict) -> bytes:
    return "".join(f"{k} = {json.dumps(v, ensure_ascii=False)}\n" for k, v in doc.items()).encode()  # JSON scalars/arrays are TOML


def _grid_usable(grid) -> None:
    from specbench_cli.sweep.grid import expand

    jobs = expand(grid, lambda task: [("1", "qa", 1), ("2", "rag", 2)])
    assert all(job.args[0] == "run" and job.units > 0 for job in jobs)


# a valid value per key, so that many grids load and their jobs are expanded
GRID_VALID = {
    "models": st.lists(st.sampled_from(["smollm2-135m", "/models/x"]), min_size=1, max_size=2),
    "methods": st.one_of(st.just(["pld"]), st.just([["pld"], ["lookahead", "ar"]])),
    "bcs": st.lists(st.integers(1, 64), min_size=1, max_size=3), "dtypes": st.just(["float32", "bfloat16"]),
    "tasks": st.just(["mini"]), "categories": st.just(["qa"]),
    "shard": st.one_of(st.sampled_from(["category", "none"]), st.integers(1, 3)), "limit": st.integers(1, 5),
    "repeats": st.integers(1, 3), "max_new_tokens": st.integers(1, 64), "threads": st.integers(1, 2),
    "questions": st.just("q.jsonl"), "device": st.just("cpu"), "seed": st.integers(0, 9),
}


@settings(FUZZ, max_examples=200)
@given(doc=st.fixed_dictionaries({"methods": st.one_of(*[GRID_VALID["methods"]] * 3, toml_values)},
                                 optional={k: st.one_of(*[GRID_VALID[k]] * 12, toml_values)
                                           for k in GRID_KEYS if k != "methods"}),
       raw=st.one_of(st.none(), st.none(), st.binary(max_size=200)))
def test_grid_reader(folder, doc, raw):
    from specbench_cli.sweep.grid import load_grid

    path = folder / "grid.toml"
    try:
        path.write_bytes(raw if raw is not None else _toml(doc))
    except ValueError:
        return
    usage_or(_grid_usable, load_grid, path)


def test_nan_and_infinity_in_files_are_refused_where_they_would_poison_metrics(folder):
    """The JSON module reads NaN: a row whose wall_time is NaN would make every speedup NaN."""
    from specbench_cli.store.runfolder import load_run

    run_dir = folder / "run_nan"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest()))
    (run_dir / "samples.jsonl").write_bytes(_lines(GOOD_ROWS + [{**GOOD_ROWS[0], "wall_time": math.inf}]))
    run = load_run(run_dir)  # the row is skipped, named in a warning; the good rows load
    assert run.rows == GOOD_ROWS and len(run.warnings) == 1 and "'wall_time'" in run.warnings[0]
