"""Every run option is declared once (a field of a config.RunConfig section); the `run` command's
parameters, what `--resume` compares, the manifest round-trip and the sweep grid schema all come
from there, through `option_fields`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
import pytest
import typer

from specbench_cli.cli.main import app
from specbench_cli.config import (
    ORDER,
    UNSET,
    BudgetSection,
    DecodingSection,
    MeasureSection,
    MethodsSection,
    ModelSection,
    OutputSection,
    RunConfig,
    TaskSection,
    config_from_manifest,
    field_default,
    flat_name,
    grid_schema,
    manifest_config,
    option_fields,
    resume_normalisers,
)
from specbench_cli.errors import UsageError
from specbench_cli.sweep.grid import SCHEMA

FIELDS = [f for _, f in option_fields()]


def run_command() -> click.Command:
    return typer.main.get_command(app).commands["run"]


def test_run_has_one_parameter_per_field_with_the_declared_flags_and_default():
    params = {p.name: p for p in run_command().params}
    for f in FIELDS:
        cli = f.metadata["cli"]
        assert cli.name in params, f"no `run` parameter for the option {flat_name(f)}"
        p = params[cli.name]
        assert set(cli.flags) <= set(p.opts) | set(p.secondary_opts)
        declared = cli.default if cli.default is not UNSET else field_default(f)
        assert p.default == declared or (declared is False and p.default in (False, None))
        # the parameter's default, turned into the stored form, is the field's default
        stored = cli.to_config(p.default) if cli.to_config else p.default
        if flat_name(f) != "methods":  # the empty selection means "every method that needs no training"
            assert stored == field_default(f), f.name
        assert p.help and cli.help in p.help


def test_resume_compares_every_field_through_the_same_conversion():
    normalise = resume_normalisers()
    assert {field for field, _ in normalise.values()} == {flat_name(f) for f in FIELDS}
    params = {p.name: p for p in run_command().params}
    assert set(normalise) <= set(params)
    field_of = {f.metadata["cli"].name: f for f in FIELDS}
    for name, (field, convert) in normalise.items():
        to_config = field_of[name].metadata["cli"].to_config
        assert convert is to_config or to_config is None


def test_manifest_round_trip_is_the_identity():
    cfg = RunConfig(model=ModelSection(name="m", dtype="bfloat16", threads=2, draft="d", forward="sdpa"),
                    methods=MethodsSection(names=["ar", "pld@6"], options={"pld": {"max_ngram": "4"}}),
                    task=TaskSection(tasks=["spec_bench"], categories=["qa"], limit=3, question_ids=["1"]),
                    budget=BudgetSection(block_complexity="auto", auto_candidates=[1, 4], auto_questions=3,
                                         auto_tokens=16),
                    decoding=DecodingSection(max_new_tokens=64, temperature=0.5, top_p=0.9, seed=7),
                    measure=MeasureSection(repeats=2, warmup=False), output=OutputSection(dir="out"))
    cfg.validate()
    stored = json.loads(json.dumps({"config": manifest_config(cfg)}))
    assert list(stored["config"]) == list(ORDER)  # one flat object, the options in their order
    assert config_from_manifest(stored) == cfg


def test_a_manifest_value_of_the_wrong_type_names_the_field():
    with pytest.raises(UsageError, match="config.max_new_tokens"):
        config_from_manifest({"config": {"max_new_tokens": "many"}}, "m.json")


def test_grid_schema_is_derived_from_the_fields():
    derived = grid_schema()
    assert set(derived) <= set(SCHEMA) and set(SCHEMA) - set(derived) == {"shard"}
    by_key = {f.metadata["grid"].key: f for f in FIELDS if f.metadata["grid"] is not None}
    assert set(by_key) == set(derived)
    for key, (check, _, default) in derived.items():
        f, g = by_key[key], by_key[key].metadata["grid"]
        if key == "methods":
            assert default is None  # required
            continue
        expected = g.default if g.default is not UNSET else field_default(f)
        if g.expands and not isinstance(expected, list):
            expected = [expected]
        assert default == expected, key
        if default is not None:
            assert check(default), f"the grid's default for '{key}' fails its own check"


@pytest.mark.parametrize("key, bad", [("bcs", [0]), ("bcs", ["big"]), ("dtypes", ["float8"]), ("max_new_tokens", 0),
                                      ("repeats", -1), ("models", []), ("limit", True), ("threads", 0)])
def test_grid_rejects_what_the_run_rejects(key, bad):
    check, _, _ = SCHEMA[key]
    assert not check(bad)


@pytest.mark.parametrize("field, value", [("max_new_tokens", 0), ("dtype", "float8"), ("block_complexity", 0),
                                          ("temperature", float("nan")), ("top_p", 0), ("repeats", 0),
                                          ("auto_candidates", "0"), ("forward", "fast"), ("limit", 0)])
def test_field_checks_reject_bad_values(field, value):
    with pytest.raises(UsageError):
        RunConfig().with_(**{field: value}).validate()


def test_every_section_field_is_one_option_walked_in_the_declared_order():
    walked = [(section, f.name) for section, f in option_fields()]
    declared = [(s.name, f.name) for s in dataclasses.fields(RunConfig)
                for f in dataclasses.fields(s.metadata["section"])]
    assert sorted(walked) == sorted(declared) and len(set(walked)) == len(walked)
    assert [flat_name(f) for f in FIELDS] == list(ORDER)
    assert list(manifest_config(RunConfig())) == list(ORDER)


def test_flat_names_are_routed_to_their_sections_and_a_copy_leaves_the_original_alone():
    cfg = RunConfig()
    hot = cfg.with_(temperature=0.7, engine_url=["http://127.0.0.1:1"], model="m", output_dir="out")
    assert (hot.decoding.temperature, hot.engines.url, hot.model.name, hot.output.dir) == (
        0.7, ["http://127.0.0.1:1"], "m", "out")
    assert (cfg.decoding.temperature, cfg.engines.url, cfg.output.dir) == (0.0, [], "results")
    assert all(getattr(hot, s.name) is not getattr(cfg, s.name) for s in dataclasses.fields(RunConfig))
    hot.set("limit", 2)
    assert hot.get("limit") == hot.task.limit == 2 and cfg.task.limit is None


def test_every_committed_manifest_reads_back_to_the_config_it_records():
    """The manifest's flat `config` round-trips through the sections: what a committed run folder
    recorded is what `--resume` and `specbench report` read back."""
    manifests = sorted((Path(__file__).parents[1] / "results" / "reference").rglob("manifest.json"))
    assert manifests
    for path in manifests:
        stored = json.loads(path.read_text(encoding="utf-8")).get("config", {})
        written = manifest_config(config_from_manifest({"config": stored}, str(path)))
        assert {k: written[k] for k in stored if k in written} == {k: v for k, v in stored.items() if k in written}, path
