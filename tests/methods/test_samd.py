"""SAM-decoding: the suffix automaton's match against a brute-force search, the drafted
continuation, and the switch to the fallback drafter when the match is short."""

from __future__ import annotations

import random

import pytest

from specbench_cli.engine.drafter import DecodeState
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.samd import SAMDecoding, SuffixAutomaton


def brute_match(text: list[int]) -> tuple[int, int]:
    """(length, first end) of the longest suffix of text that occurs ending before its last position."""
    n = len(text)
    for length in range(n - 1, 0, -1):
        suffix = text[n - length:]
        for end in range(length - 1, n - 1):
            if text[end - length + 1:end + 1] == suffix:
                return length, end
    return 0, -1


@pytest.mark.parametrize("seed", range(20))
def test_the_matcher_finds_the_longest_earlier_suffix_and_its_first_occurrence(seed):
    rng = random.Random(seed)
    sam = SuffixAutomaton()
    text: list[int] = []
    for _ in range(120):
        token = rng.randrange(3 if seed % 2 else 6)
        text.append(token)
        sam.add(token)
        length, end = brute_match(text)
        assert sam.match == length
        if length:
            assert sam.continuation(4) == text[end + 1:end + 5]


def test_a_repeated_phrase_is_drafted_from_its_earlier_occurrence():
    sam = SuffixAutomaton()
    for t in [1, 2, 3, 4, 5, 6, 9, 1, 2, 3]:
        sam.add(t)
    assert sam.match == 3 and sam.continuation(3) == [4, 5, 6]


def _samd(**options):
    return SAMDecoding(MethodContext(budget=6), **options)


def test_short_matches_go_to_the_fallback_and_long_ones_to_the_automaton(monkeypatch):
    m = _samd(threshold=3, fallback="pld")
    m.reset([1])
    calls = []
    monkeypatch.setattr(m.fallback.method, "propose", lambda state: calls.append(state) or m.fallback.method.__class__.propose(m.fallback.method, state))
    m.fallback.method.reset([1])
    d = m.propose(DecodeState(ids=[1, 2, 3, 4, 5, 1, 2], prompt_len=1, budget=6, remaining=50))
    assert len(calls) == 1 and m.counts == {"sam": 0, "fallback": 1}  # match [1, 2]: 2 < 3
    d = m.propose(DecodeState(ids=[1, 2, 3, 4, 5, 1, 2, 3], prompt_len=1, budget=6, remaining=50))
    assert d.tokens == [4, 5, 1, 2, 3] and m.counts["sam"] == 1  # match [1, 2, 3]: its continuation, BC-1 long


def test_without_a_fallback_short_matches_draft_nothing():
    m = _samd(threshold=4, fallback="none")
    m.reset([1])
    assert len(m.propose(DecodeState(ids=[1, 2, 3, 1, 2], prompt_len=1, budget=6, remaining=50))) == 0
    assert m.stats() == {"steps_sam": 0, "steps_fallback": 0}


@pytest.mark.parametrize("options, message", [({"threshold": 0}, "samd.threshold"),
                                              ({"fallback": "eagle2"}, "samd.fallback must be one of"),
                                              ({"fallback": "recycling", "threshold": "x"}, "expects int"),
                                              ({"fallback": "eagle"}, "pass -o samd.heads=DIR"),
                                              ({"fallback": "pld", "heads": "x"}, "samd.heads is for a head fallback")])
def test_bad_options_are_usage_errors(options, message):
    with pytest.raises(UsageError, match=message):
        _samd(**options)


@pytest.mark.parametrize("fallback", ["eagle", "eagle3", "hydra", "medusa"])
@pytest.mark.parametrize("budget", [4, 10, 30])
def test_samd_with_a_head_fallback_equals_ar_and_uses_both_drafters(fallback, budget, tiny_model, tiny_tok,
                                                                      tiny_heads, tmp_path_factory):
    """Spec-Bench's SAMD[EAGLE2] row: the automaton drafts long matches, the heads the rest; the
    heads' cache (EAGLE's, Hydra's prefix layer) is fed on the automaton's steps too (absorb), so
    every step stays exact."""
    from helpers.tiny import EOS
    from helpers.tiny_eagle3 import train_tiny_eagle3

    from specbench_cli import methods
    from specbench_cli.engine.loop import Decoder

    heads = tiny_heads.get(fallback) or train_tiny_eagle3(tiny_model, tmp_path_factory.mktemp("e3") / "h")
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    dec = Decoder(tiny_model, {EOS})
    samd = SAMDecoding.create(ctx, fallback=fallback, heads=heads)
    ar = methods.get("ar").create(ctx)
    used = {"sam": 0, "fallback": 0}
    for prompt in ([2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]):
        got = dec.generate(samd, prompt, 48, budget)
        assert got.output_ids == dec.generate(ar, prompt, 48, budget).output_ids
        used = {k: used[k] + got.stats[f"steps_{k}"] for k in used}
    assert used["sam"] > 0 and used["fallback"] > 0, used
