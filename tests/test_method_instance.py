"""A method instance (`pld`, `pld@6`, `pld@auto`, `pld@adaptive`, `llama.cpp:ngram-mod@5`) is
parsed once, by planning, into a `MethodInstance` (config/instance.py); a malformed one is one
line naming it."""

from __future__ import annotations

import pytest

from specbench_cli.config import DecodingSection, MethodsSection, RunConfig
from specbench_cli.config.instance import MethodInstance, method_order, parse_instance, run_order
from specbench_cli.errors import UsageError


@pytest.mark.parametrize("text, name, engine, budget", [
    ("pld", "pld", None, None),
    ("pld@10", "pld", None, 10),
    ("pld@ 6", "pld", None, 6),
    ("pld@auto", "pld", None, "auto"),
    ("pld@AUTO", "pld", None, "auto"),
    ("samd@adaptive", "samd", None, "adaptive"),
    ("ar", "ar", None, None),
    ("llama.cpp:ngram-mod", "llama.cpp:ngram-mod", "llama.cpp", None),
    ("llama.cpp:ngram-mod@5", "llama.cpp:ngram-mod", "llama.cpp", 5),
    ("vllm:ar", "vllm:ar", "vllm", None),
    ("llama.cpp:draft@auto", "llama.cpp:draft", "llama.cpp", "auto"),
])
def test_every_form(text, name, engine, budget):
    inst = parse_instance(text)
    assert inst == MethodInstance(label=text, name=name, engine=engine, budget=budget)
    assert inst.label == text  # the rows' `method` stays the string as listed


@pytest.mark.parametrize("text, message", [
    ("@6", "method '@6': expected NAME@BC (a number, 'auto' or 'adaptive')"),
    ("ar@6", "method 'ar@6': ar ignores the block complexity; list it as 'ar'"),
    ("ar@auto", "method 'ar@auto': ar ignores the block complexity; list it as 'ar'"),
    ("pld@0", "method 'pld@0': the BC after '@' must be between 1 and 4096 (got 0)"),
    ("pld@4097", "method 'pld@4097': the BC after '@' must be between 1 and 4096 (got 4097)"),
    ("pld@x", "method 'pld@x': the BC after '@' must be a whole number, 'auto' or 'adaptive' (got 'x')"),
    ("pld@", "method 'pld@': the BC after '@' must be a whole number, 'auto' or 'adaptive' (got '')"),
    ("pld@6@7", "method 'pld@6@7': the BC after '@' must be a whole number, 'auto' or 'adaptive' (got '6@7')"),
    ("pld@adaptiv", "method 'pld@adaptiv': the BC after '@' must be a whole number, 'auto' or 'adaptive' "
                    "(got 'adaptiv')"),
])
def test_every_bad_form_is_one_line(text, message):
    with pytest.raises(UsageError) as e:
        parse_instance(text)
    assert str(e.value) == message and "\n" not in str(e.value)


@pytest.mark.parametrize("text, run_bc, budget, label", [
    ("pld", 10, 10, "pld"), ("pld", "auto", "auto", "pld@auto"), ("pld", "adaptive", "adaptive", "pld@adaptive"),
    ("pld@6", "auto", 6, "pld@6"), ("pld@auto", 10, "auto", "pld@auto"), ("ar", "auto", 1, "ar"),
    ("ar", 4, 4, "ar"), ("llama.cpp:ngram-mod@5", 10, 5, "llama.cpp:ngram-mod@5"),
])
def test_budget_and_row_label_at_the_runs_block_complexity(text, run_bc, budget, label):
    inst = parse_instance(text)
    assert inst.budget_in(run_bc) == budget
    assert inst.row_label(inst.name, run_bc) == label


def test_run_order_puts_ar_first_and_each_engines_ar_before_its_methods():
    listed = [parse_instance(s) for s in ("pld@6", "llama.cpp:ngram-mod@5", "pld@6", "ar", "vllm:ngram")]
    assert [i.label for i in run_order(listed)] == ["ar", "pld@6", "llama.cpp:ar", "llama.cpp:ngram-mod@5",
                                                    "vllm:ar", "vllm:ngram"]
    assert method_order(["pld@6", "llama.cpp:ngram-mod@5", "pld@6", "ar", "vllm:ngram"]) == [
        i.label for i in run_order(listed)]


def test_a_run_parses_each_instance_once_and_validates_once(monkeypatch):
    """Planning a temperature sweep parses the method list once and checks the fields once;
    what it plans is keyed by the typed instances."""
    from specbench_cli.run import plan

    parsed, validated, real_parse, real_validate = [], [], plan.parse_instance, RunConfig.validate
    monkeypatch.setattr(plan, "parse_instance", lambda text: parsed.append(text) or real_parse(text))
    monkeypatch.setattr(RunConfig, "validate", lambda self: validated.append(1) or real_validate(self))
    cfg = RunConfig(methods=MethodsSection(names=["pld@6", "pld"]), decoding=DecodingSection(temperature=[0.0, 1.0]))
    planned = plan.check_config(cfg)
    assert parsed == ["pld@6", "pld"] and validated == [1]
    assert [(i.label, m.ctx.budget) for i, m in planned.items()] == [("ar", 10), ("pld@6", 6), ("pld", 10)]
