"""Every method option has declared bounds, checked in one place (`options.check_option`)
before any model loads. Property: for option values drawn across each option's type and well
past its bounds (and block complexities up to the ceiling), a method either refuses with a
UsageError (the CLI's exit 2) or plans, binds and decodes; never another exception (exit 1),
never more than 2 GB of memory."""

from __future__ import annotations

import dataclasses
import math
import resource

import pytest
from helpers.artifacts import artifact_options
from helpers.tiny import EOS, make_model, make_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench_cli import methods
from specbench_cli.config.syntax import MAX_BUDGET
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.options import option_bounds, type_name
from specbench_cli.targets import as_target

NAMES = methods.names()
PROMPT = [2, 40, 41, 42, 40, 41, 42, 40, 41]
MEMORY_LIMIT = 2 << 30


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounds-draft")
    make_model(1).save_pretrained(d)
    make_tokenizer().save_pretrained(d)
    return str(d)


def test_every_numeric_option_declares_bounds():
    """A new numeric option without bounds would let any value reach the drafter."""
    for name in NAMES:
        for f in dataclasses.fields(methods.get(name).Options):
            if type_name(f.type) in ("int", "float") and f.name != "seed":
                lo, hi, choices = option_bounds(f)
                assert choices is not None or (lo is not None and hi is not None), f"{name}.{f.name} has no bounds"


def _values(f: dataclasses.Field) -> st.SearchStrategy:
    lo, hi, choices = option_bounds(f)
    t = type_name(f.type)
    text = st.text(min_size=0, max_size=6)
    if choices is not None:
        return st.one_of(st.sampled_from(choices), text, st.integers(-5, 5))
    if t == "int":
        lo, hi = (lo if lo is not None else -100), (hi if hi is not None else 100)
        near = st.integers(int(lo) - 3, int(min(hi, lo + 40)) + 3)
        return st.one_of(near, st.integers(int(hi) - 2, int(hi) + 2), st.sampled_from([-10**12, 10**12, 0]),
                         st.booleans(), st.floats(allow_nan=True), text.map(lambda s: s or "7"))
    if t == "float":
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), text)
    if t == "bool":
        return st.one_of(st.booleans(), st.sampled_from(["yes", "off", "2", ""]))
    return st.one_of(text, st.integers(-3, 3))


def _skip(name: str, field: str) -> bool:
    # paths to files and models are checked by their own tests (bad_input); drawn text would
    # only produce "not found" here
    # the artifacts a method requires are given (tiny ones), not drawn
    return field in ("heads", "tree", "draft_model", "trigger", "datastore")


@pytest.mark.parametrize("name", NAMES)
def test_any_option_values_refuse_or_decode(name, tiny_model, tiny_tok, draft_dir, request):
    fields = [f for f in dataclasses.fields(methods.get(name).Options) if not _skip(name, f.name)]
    artifacts = artifact_options(methods.get(name), request)  # what it declares it requires
    dec = Decoder(as_target(tiny_model), {EOS})
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(data=st.data(), budget=st.one_of(st.integers(1, 70), st.sampled_from([MAX_BUDGET, 0, -1])))
    def check(data, budget):
        options = {f.name: data.draw(_values(f), label=f.name) for f in fields if data.draw(st.booleans())}
        options.update(artifacts)
        ctx = MethodContext(tiny_model, tiny_tok, budget=max(1, budget), draft_model=draft_dir)
        try:
            method = methods.get(name)(ctx, **options)
        except UsageError:
            return
        method.bind(tiny_model, tiny_tok)
        gen = dec.generate(method, PROMPT, 6, ctx.budget)
        assert len(gen.output_ids) >= 1
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        assert rss - start < MEMORY_LIMIT, f"{name} grew by {(rss - start) >> 20} MB with {options}"

    check()


def test_float_options_refuse_nan_and_infinity():
    from specbench_cli.options import parse_options

    opts = methods.get("mask-probe").Options
    for bad in ("nan", "inf", "-inf", math.nan):
        with pytest.raises(UsageError, match="mask-probe.ema"):
            parse_options("mask-probe", opts, {"ema": bad})


def test_planning_at_the_budget_ceiling_is_quick_and_small():
    """The largest BC every method may be planned at: bounded planning (no model)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    for name in NAMES:
        if methods.get(name).requires:  # their artifacts are checked when they plan: not at this ceiling
            continue
        try:
            methods.get(name)(MethodContext(budget=MAX_BUDGET))
        except UsageError:
            pass
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before < MEMORY_LIMIT
