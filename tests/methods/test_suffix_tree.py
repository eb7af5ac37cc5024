"""SuffixDecoding's suffix trees (methods/retrieval/suffix_tree.py): identical to the reference's
(ArcticInference's `arctic_inference.suffix_decoding`) on recorded random and real histories,
and right by a brute-force reading of the paper's definition on many more.

The recorded data (tests/data/suffix_reference.json.gz) holds the reference's drafts for
random programs (trees and caches built, shrunk and queried at random) and for the trace of a
real run's answers (`benchmarks/suffix_peers.py golden`); the programs are made again here and
must hash as recorded. With SPECBENCH_ARCTIC_PYTHON naming a python that has arctic-inference,
a slow test runs the reference itself on further random programs."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
from helpers.suffix_reference import GOLDEN, SCRIPT, peers

from specbench_cli.methods.retrieval.suffix_tree import SuffixTree, f32


@pytest.fixture(scope="module")
def golden():
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


def test_random_programs_draft_exactly_as_the_reference(golden):
    rec = golden["random"]
    programs = peers().random_programs(rec["seed"], rec["count"])
    assert peers().digest(programs) == rec["sha256"], "the random programs are no longer the recorded ones"
    ours = peers().run_all(programs, peers().Ours())
    drafts = sum(isinstance(r, list) for prog in rec["results"] for r in prog)
    assert drafts > 5000
    for i, (got, want) in enumerate(zip(ours, rec["results"])):
        assert got == want, f"program {i} differs from the reference"


def test_a_real_run_drafts_exactly_as_the_reference(golden):
    rec = golden["real"]
    program, counts = peers().trace_program(rec["histories"], rec["settings"])
    assert peers().digest([program]) == rec["sha256"], "our drafts accepted other tokens than the reference's"
    (ours,) = peers().run_all([program], peers().Ours())
    assert counts["steps"] > 100 and len(ours) == len(rec["results"][0])
    assert ours == rec["results"][0]
    turns = {h["turn"] for h in rec["histories"]}
    assert turns == {0, 1}  # first turns and the revisions that repeat them


def test_a_trace_replays_the_suffix_instance_that_drafts_only_from_its_trees():
    """Run folders name instances by budget (`suffix@auto`); the trace takes the one without a
    model fallback, and AR only when the run has no suffix at all."""
    pick = peers().suffix_instance
    none, heads = {"params": {"fallback": "none"}}, {"params": {"fallback": "hydra"}}
    assert pick({"ar": {}, "pld@auto": {}, "suffix@auto": none}) == "suffix@auto"
    assert pick({"ar": {}, "suffix@auto": heads, "suffix@6": none}) == "suffix@6"
    assert pick({"ar": {}, "suffix": {"params": {}}}) == "suffix"
    assert pick({"ar": {}, "suffixes": none, "samd@auto": none}) == "ar"


ARCTIC = os.environ.get("SPECBENCH_ARCTIC_PYTHON")


@pytest.mark.slow
@pytest.mark.skipif(not ARCTIC, reason="SPECBENCH_ARCTIC_PYTHON names no python with arctic-inference")
@pytest.mark.parametrize("seed", [11, 12])
def test_the_reference_itself_on_more_random_programs(seed, tmp_path):
    programs = tmp_path / "programs.json"
    programs.write_text(json.dumps({"programs": peers().random_programs(seed, 1500)}))
    out = tmp_path / "ref.json"
    done = subprocess.run([ARCTIC, str(SCRIPT), "replay", "--impl", "reference", "--programs", str(programs),
                           "--rounds", "0", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    ref = json.loads(out.read_text())["results"]
    ours = peers().run_all(json.loads(programs.read_text())["programs"], peers().Ours())
    same, total, first = peers().compare({"results": ours}, {"results": ref})
    assert same == total, first


# ----------------------------------------------------------------------------- the paper's definition

def counts_of(seqs: list[list[int]], depth: int) -> Counter:
    """count[s] = how many suffixes (each cut at `depth` tokens) of the sequences start with s."""
    c: Counter = Counter()
    for seq in seqs:
        for start in range(len(seq)):
            for n in range(1, min(depth, len(seq) - start) + 1):
                c[tuple(seq[start:start + n])] += 1
    return c


def candidates(count: Counter, match: tuple, depth: int, min_prob: float) -> dict[tuple, float]:
    """Every continuation x of `match` the tree holds, with its probability: the product of
    count(s + t) / count(s) over the steps where the count drops (where the trie branches or a
    suffix ends), in float32; those below `min_prob` (and their descendants) left out."""
    following: dict[tuple, set] = {}
    for key in count:
        following.setdefault(key[:-1], set()).add(key[-1])
    out, frontier = {}, [((), 1.0)]
    while frontier:
        x, p = frontier.pop()
        s = match + x
        for t in following.get(s, ()) if len(s) < depth else ():
            c = count[s + (t,)]
            q = p if c == count[s] else f32(f32(p * c) / count[s])
            if q >= f32(min_prob):
                out[x + (t,)] = q
                frontier.append((x + (t,), q))
    return out


def expected(seqs, depth, context, n, factor, min_prob):
    """(score, match length, sorted probabilities) of the best draft by the definition."""
    count = counts_of(seqs, depth)
    best = (0.0, 0, [])
    for L in range(1, len(context)):
        m = tuple(context[-L:])
        if L > depth or count[m] == 0:
            break
        cap = max(min(n, int(f32(f32(L * f32(factor))) + 1e-6)), 0)
        probs = sorted(candidates(count, m, depth, min_prob).values(), reverse=True)[:cap]
        score = 0.0
        for p in probs:
            score = f32(score + p)
        if score >= best[0]:
            best = (score, L, probs)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_drafts_are_the_likeliest_continuations_by_the_definition(seed):
    rng = random.Random(seed)
    depth, vocab = rng.choice([2, 3, 5, 8]), rng.choice([2, 3, 5])
    tree, seqs = SuffixTree(depth), {}
    for _ in range(rng.randint(2, 8)):
        if seqs and rng.random() < 0.2:
            gone = rng.choice(sorted(seqs))
            tree.remove(gone)
            del seqs[gone]
        sid = rng.randrange(4)
        chunk = [rng.randrange(vocab) for _ in range(rng.randint(1, 15))]
        tree.extend(sid, chunk)
        seqs.setdefault(sid, []).extend(chunk)
        assert tree.check_integrity() == ""
    texts = [s for s in seqs.values() if s]
    for _ in range(15):
        source = rng.choice(texts)
        context = source[:rng.randint(1, len(source))][-(depth + 2):] + ([rng.randrange(vocab)] if rng.random() < 0.3 else [])
        n, factor, min_prob = rng.randint(1, 12), rng.choice([1.0, 2.0, 8.0]), rng.choice([0.0, 0.1, 0.3])
        draft = tree.speculate(context, n, factor, 0.0, min_prob, True)
        score, match_len, probs = expected(list(seqs.values()), depth, context, n, factor, min_prob)
        assert (draft.score, draft.match_len) == (score, match_len)
        assert sorted(draft.probs, reverse=True) == probs
        # every node is a continuation the tree holds, below its parent, with that probability
        count = counts_of(list(seqs.values()), depth)
        held = candidates(count, tuple(context[-match_len:]), depth, min_prob) if match_len else {}
        paths: list[tuple] = []
        for tok, parent, p in zip(draft.token_ids, draft.parents, draft.probs):
            path = (paths[parent] if parent >= 0 else ()) + (tok,)
            paths.append(path)
            assert held[path] == p


def test_the_request_tree_finds_its_own_suffixes_without_walking():
    """The per-request tree reads where the context's suffixes end from its active nodes; the
    result is what walking from the root finds."""
    rng = random.Random(3)
    tree = SuffixTree(6)
    seq: list[int] = []
    for _ in range(200):
        tok = rng.randrange(4)
        tree.append(0, tok)
        seq.append(tok)
        context = seq[-rng.randint(1, 8):]
        walked = []
        for L in range(1, len(context)):
            node, idx = tree._match(context[-L:])
            if node is None:
                break
            walked.append((node, idx))
        assert tree._matches(context) == walked


def test_a_repeated_passage_is_drafted_with_its_continuation_first():
    tree = SuffixTree(64)
    text = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 9, 1, 2, 3]
    tree.extend(0, text)
    d = tree.speculate(text, 4, 1.0, 0.0, 0.1, True)
    # "1 2 3" occurs three times (the last is the context's own end): followed by 4 twice, then
    # by 5 once and 9 once; a match of 3 tokens drafts at most 3
    first = f32(2 / 3)
    assert d.match_len == 3 and (d.token_ids[0], d.probs[0]) == (4, first)
    assert sorted(zip(d.token_ids[1:], d.probs[1:], d.parents[1:])) == [(5, f32(first / 2), 0), (9, f32(first / 2), 0)]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
