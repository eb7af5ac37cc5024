"""A bound is declared once, as an `options.Bound`, and the same object checks and words the refusal
for method options (`opt(lo=, hi=)`), run options (config/) and every number option of every
command (cli/main.py's `NUMBER`)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from specbench_cli import config
from specbench_cli.cli import main
from specbench_cli.errors import UsageError
from specbench_cli.options import Bound, check_option, opt, option_bounds

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("bound,inside,outside,words", [
    (Bound(1, 64), [1, 64, 7.5], [0, 65, math.nan], "between 1 and 64"),
    (Bound(1), [1, 10**30], [0, -1, math.nan], "at least 1"),
    (Bound(hi=5), [-3, 5], [6, math.nan], "at most 5"),
    (Bound(0, finite=True), [0, 2.5], [-1, math.nan, math.inf], "a finite number >= 0"),
    (Bound(0, 1, finite=True), [0, 1], [-0.1, 1.1, math.nan], "a finite number between 0 and 1"),
])
def test_a_bound_checks_and_words_its_refusal(bound, inside, outside, words):
    assert all(bound.holds(v) and bound.check(v, "--x") == v for v in inside)
    for v in outside:
        assert not bound.holds(v)
        with pytest.raises(UsageError, match=f"^--x must be {words} \\(got {v}\\)$"):
            bound.check(v, "--x")


def test_method_options_run_options_and_command_numbers_share_the_declaration():
    @dataclasses.dataclass
    class Options:
        k: int = opt(4, lo=1, hi=config.MAX_BATCH)

    (field,) = dataclasses.fields(Options)
    assert option_bounds(field) == (1, config.MAX_BATCH, None)
    with pytest.raises(UsageError) as method_refusal:
        check_option("m", field, 0)
    with pytest.raises(UsageError) as run_refusal:
        config.RunConfig(decoding=config.DecodingSection(batch_size=0)).validate()
    assert str(method_refusal.value) == str(config.BATCH.refusal(0, "option m.k"))
    assert str(run_refusal.value) == str(config.BATCH.refusal(0, "--batch-size"))
    assert str(run_refusal.value).split(" must ")[1] == str(method_refusal.value).split(" must ")[1]
    with pytest.raises(UsageError, match=r"--bc must be between 1 and 4096 \(got 0\)"):
        config.parse_bc("0", "--bc")
    assert main.NUMBER == Bound(0, finite=True)


def test_no_bound_is_worded_by_hand_in_the_three_places():
    """The wording lives in `Bound.span`; the modules that declare bounds only declare them."""
    for module in sorted((ROOT / "specbench_cli/config").glob("*.py")) + [ROOT / "specbench_cli/cli/main.py"]:
        text = module.read_text(encoding="utf-8")
        assert "must be at least" not in text and "must be at most" not in text and ">= 0 (got" not in text, module
    options = (ROOT / "specbench_cli/options.py").read_text(encoding="utf-8")
    assert options.count("between {") == 1  # Bound.span
