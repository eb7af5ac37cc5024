"""Every run option is declared once (config.RunConfig); the `run` command's parameters, what
`--resume` compares, the manifest round-trip and the sweep grid schema all come from there."""

from __future__ import annotations

import dataclasses
import json

import click
import pytest
import typer

from specbench_cli.cli.main import app
from specbench_cli.config import (
    UNSET,
    RunConfig,
    config_from_manifest,
    field_default,
    grid_schema,
    resume_normalisers,
)
from specbench_cli.errors import UsageError
from specbench_cli.sweep.grid import SCHEMA

FIELDS = dataclasses.fields(RunConfig)


def run_command() -> click.Command:
    return typer.main.get_command(app).commands["run"]


def test_run_has_one_parameter_per_field_with_the_declared_flags_and_default():
    params = {p.name: p for p in run_command().params}
    for f in FIELDS:
        cli = f.metadata["cli"]
        assert cli.name in params, f"no `run` parameter for RunConfig.{f.name}"
        p = params[cli.name]
        assert set(cli.flags) <= set(p.opts) | set(p.secondary_opts)
        declared = cli.default if cli.default is not UNSET else field_default(f)
        assert p.default == declared or (declared is False and p.default in (False, None))
        # the parameter's default, turned into the stored form, is the field's default
        stored = cli.to_config(p.default) if cli.to_config else p.default
        if f.name != "methods":  # the empty selection means "every method that needs no training"
            assert stored == field_default(f), f.name
        assert p.help and cli.help in p.help


def test_resume_compares_every_field_through_the_same_conversion():
    normalise = resume_normalisers()
    assert {field for field, _ in normalise.values()} == {f.name for f in FIELDS}
    params = {p.name: p for p in run_command().params}
    assert set(normalise) <= set(params)
    field_of = {f.metadata["cli"].name: f for f in FIELDS}
    for name, (field, convert) in normalise.items():
        to_config = field_of[name].metadata["cli"].to_config
        assert convert is to_config or to_config is None


def test_manifest_round_trip_is_the_identity():
    cfg = RunConfig(model="m", methods=["ar", "pld@6"], method_options={"pld": {"max_ngram": "4"}},
                    tasks=["spec_bench"], categories=["qa"], limit=3, question_ids=["1"], block_complexity="auto",
                    max_new_tokens=64, dtype="bfloat16", threads=2, temperature=0.5, top_p=0.9, seed=7,
                    repeats=2, warmup=False, draft_model="d", output_dir="out", auto_candidates=[1, 4],
                    auto_questions=3, auto_tokens=16, forward="sdpa")
    cfg.validate()
    stored = json.loads(json.dumps({"config": dataclasses.asdict(cfg)}))
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
        RunConfig(**{field: value}).validate()
