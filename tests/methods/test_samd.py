"""SAM-decoding: the suffix automaton's match against a brute-force search, the drafted
continuation, and the switch to the fallback drafter when the match is short."""

from __future__ import annotations

import random

import pytest

from specbench_cli.decoding.drafter import DecodeState
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.samd import SEPARATOR, SAMDecoding, SuffixAutomaton, corpus_automaton
from specbench_cli.targets import as_target


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
    assert len(calls) == 1 and m.counts == {"sam": 0, "static": 0, "fallback": 1, "merged": 0}  # match [1, 2]: 2 < 3
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
    from specbench_cli.decoding.decoder import Decoder

    heads = tiny_heads.get(fallback) or train_tiny_eagle3(tiny_model, tmp_path_factory.mktemp("e3") / "h")
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    dec = Decoder(as_target(tiny_model), {EOS})
    samd = SAMDecoding.create(ctx, fallback=fallback, heads=heads)
    ar = methods.get("ar").create(ctx)
    used = {"sam": 0, "fallback": 0}
    for prompt in ([2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]):
        got = dec.generate(samd, prompt, 48, budget)
        assert got.output_ids == dec.generate(ar, prompt, 48, budget).output_ids
        used = {k: used[k] + got.stats[f"steps_{k}"] for k in used}
    assert used["sam"] > 0 and used["fallback"] > 0, used


def brute_corpus_match(corpus: list[list[int]], text: list[int]) -> tuple[int, list[int]]:
    """(length, what followed) of the longest suffix of text found in a corpus sequence: the
    continuation after its first occurrence in the corpus's order, to the end of that sequence."""
    for length in range(len(text), 0, -1):
        suffix = text[len(text) - length:]
        for seq in corpus:
            for end in range(length - 1, len(seq)):
                if seq[end - length + 1:end + 1] == suffix:
                    return length, seq[end + 1:]
    return 0, []


@pytest.mark.parametrize("seed", range(12))
def test_the_static_automaton_matches_across_the_corpus_and_never_across_its_texts(seed):
    rng = random.Random(seed)
    kinds = 3 if seed % 2 else 5
    corpus = [[rng.randrange(kinds) for _ in range(rng.randrange(1, 30))] for _ in range(rng.randrange(1, 6))]
    sam = corpus_automaton(corpus)
    at, text = (0, 0), []
    for _ in range(60):
        token = rng.randrange(kinds)
        text.append(token)
        at = sam.step(*at, token)
        length, after = brute_corpus_match(corpus, text)
        assert at[1] == length
        if length:  # the first occurrence in the corpus's order, cut at the end of its text
            assert sam.continuation(6, at[0]) == after[:6]
    assert SEPARATOR not in sum(corpus, [])


def _static_samd(tmp_path, corpus, **options):
    from helpers.tiny import make_tokenizer

    from specbench_cli.methods.retrieval.datastore import write

    tok = make_tokenizer()
    write(corpus, tok, tmp_path / "ds", ["test corpus"], index=False)
    m = SAMDecoding(MethodContext(tokenizer=tok, budget=6), datastore=str(tmp_path / "ds"), **options)
    m.setup()
    return m


def test_the_corpus_drafts_when_its_match_beats_the_requests_own_by_more_than_the_bias(tmp_path):
    m = _static_samd(tmp_path, [[7, 8, 9, 10, 11, 12, 13], [20, 21]], fallback="none", static_bias=1)
    m.reset([1])
    # no match of its own against the corpus's [7, 8, 9] (3 - 1 = 2, the threshold): the corpus
    d = m.propose(DecodeState(ids=[1, 8, 5, 7, 8, 9], prompt_len=1, budget=6, remaining=50))
    assert d.tokens == [10, 11, 12, 13] and m.counts["static"] == 1  # the corpus's text ends after 13
    m.reset([1])
    d = m.propose(DecodeState(ids=[1, 8, 5, 8, 9], prompt_len=1, budget=6, remaining=50))
    assert len(d) == 0  # the corpus's [8, 9]: 2 - 1 = 1, below the threshold; the request's own: none
    m.reset([1])
    # own match [3, 4, 5] (3) against the corpus's [9, 10] (2 - 1 = 1): the request's own text
    d = m.propose(DecodeState(ids=[1, 3, 4, 5, 6, 3, 4, 5, 9, 10, 3, 4, 5], prompt_len=1, budget=6, remaining=50))
    assert d.tokens[:3] == [6, 3, 4] and m.counts == {"sam": 1, "static": 0, "fallback": 0, "merged": 0}
    assert m.stats()["steps_static"] == 0 and m.params()["datastore_entries"] == 2
    assert m.label() == "samd(fallback=none,datastore=ds,static_bias=1)"


def test_a_datastore_without_its_arrays_or_damaged_is_refused(tmp_path):
    import json

    import numpy as np
    from helpers.tiny import make_tokenizer

    from specbench_cli.methods.retrieval import datastore as store

    tok = make_tokenizer()
    store.write([[1, 2, 3], [4, 5]], tok, tmp_path / "ds", ["x"], index=False)
    meta = store.read_meta(tmp_path / "ds", index=False)
    assert store.read_sequences(tmp_path / "ds", meta, "samd") == [[1, 2, 3], [4, 5]]
    with pytest.raises(UsageError, match="built without draftretriever's index"):
        store.read_meta(tmp_path / "ds")  # what rest asks for
    old = dict(meta, version=1)
    (tmp_path / "ds" / store.META).write_text(json.dumps(old))
    with pytest.raises(UsageError, match="version-1 datastore without its token arrays"):
        SAMDecoding(MethodContext(budget=6), datastore=str(tmp_path / "ds"))
    (tmp_path / "ds" / store.META).write_text(json.dumps(meta))
    np.save(tmp_path / "ds" / store.LENGTHS, np.array([3, 3]))
    with pytest.raises(UsageError, match="lengths adding up to 6 for 5 tokens"):
        store.read_sequences(tmp_path / "ds", meta, "samd")
    np.save(tmp_path / "ds" / store.LENGTHS, np.array([3, 2]))
    np.save(tmp_path / "ds" / store.TOKENS, np.array([1, 2, 3, 4, 99999], dtype=np.int32))
    with pytest.raises(UsageError, match="outside the 128-token vocabulary"):
        store.read_sequences(tmp_path / "ds", meta, "samd")
    (tmp_path / "ds" / store.TOKENS).write_bytes(b"junk")
    with pytest.raises(UsageError, match="damaged or replaced"):
        SAMDecoding(MethodContext(budget=6), datastore=str(tmp_path / "ds"))
    with pytest.raises(UsageError, match="samd datastore .*nowhere: not a folder"):
        SAMDecoding(MethodContext(budget=6), datastore=str(tmp_path / "nowhere"))


@pytest.mark.parametrize("budget", [4, 10, 30])
def test_samd_with_a_corpus_equals_ar_and_drafts_from_the_corpus(budget, tiny_model, tiny_tok, tiny_datastore):
    """The corpus (the tiny model's own answers to the lossless prompts) drafts most steps with
    no bias; every answer is still AR's."""
    from helpers.artifacts import equals_ar_counting

    samd = SAMDecoding.create(MethodContext(tiny_model, tiny_tok, budget=budget), datastore=tiny_datastore,
                              static_bias=0)
    assert equals_ar_counting(samd, tiny_model, tiny_tok, budget, "steps_static") > 0


def test_a_runs_answers_become_a_corpus_once_each(tmp_path):
    """samples.jsonl rows hold the same answer once per lossless method: each text is stored once."""
    from helpers.tiny import make_tokenizer

    from specbench_cli.methods.retrieval import datastore as store

    tok = make_tokenizer()
    rows = [{"method": m, "question_id": "1", "output_text": "the cat sat on the mat"} for m in ("ar", "pld")]
    rows.append({"method": "ar", "question_id": "2", "output_text": "the dog sat"})
    meta = store.build(rows, tok, tmp_path / "ds", ["samples.jsonl"])
    assert meta["entries"] == 2 and meta["tokens_bytes"] == (tmp_path / "ds" / store.TOKENS).stat().st_size
    seqs = store.read_sequences(tmp_path / "ds", store.read_meta(tmp_path / "ds", index=False), "samd")
    assert seqs == [tok("the cat sat on the mat", add_special_tokens=False)["input_ids"],
                    tok("the dog sat", add_special_tokens=False)["input_ids"]]


def test_merge_unites_the_chain_and_the_tree_and_keeps_the_likeliest_nodes_with_their_parents():
    from specbench_cli.decoding.draft import Draft
    from specbench_cli.methods.core.merge import merge

    chain = Draft.chain([5, 6, 7, 8], signal=[101] * 4)
    tree = Draft(tokens=[5, 9, 6, 3], parents=[-1, -1, 0, 1], signal=[1, 2, 1, 1])
    got = merge([(chain, [0.5, 0.3, 0.2, 0.1]), (tree, [0.5, 0.15, 0.25, 0.05])], 5)
    # [5] and [5, 6] are drafted by both: one node each, the higher score's class
    assert got.tokens == [5, 9, 6, 7, 8] and got.parents == [-1, -1, 0, 2, 3]
    assert got.signal == [101, 2, 101, 101, 101]
    # a child scored above its parent is capped by it: the parent is always kept first
    odd = merge([(Draft(tokens=[1, 2], parents=[-1, 0]), [0.1, 0.9]), (Draft.chain([3]), [0.5])], 2)
    assert odd.tokens == [1, 3] and odd.parents == [-1, -1]
    assert len(merge([], 4)) == 0 and len(merge([(chain, [0.5, 0.3, 0.2, 0.1])], 0)) == 0


def test_merge_needs_a_fallback_that_scores_its_nodes():
    with pytest.raises(UsageError, match="samd.merge=true .*needs samd.fallback=recycling"):
        _samd(merge=True, fallback="pld")


@pytest.mark.parametrize("budget", [4, 10, 30])
def test_samd_merged_with_recycling_equals_ar_and_merges(budget, tiny_model, tiny_tok):
    from helpers.artifacts import equals_ar_counting

    samd = SAMDecoding.create(MethodContext(tiny_model, tiny_tok, budget=budget), merge=True)
    assert equals_ar_counting(samd, tiny_model, tiny_tok, budget, "steps_merged") > 0
