"""REST: the datastore (built through draftretriever, checked before use) and the draft trie.
Losslessness is in test_lossless.py with the other methods."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("draftretriever")

from specbench_cli.errors import UsageError  # noqa: E402
from specbench_cli.methods.rest import trie_from_paths  # noqa: E402
from specbench_cli.methods.retrieval import datastore as store  # noqa: E402

CORPUS = [{"conversations": [{"from": "human", "value": "the cat sat on the mat"},
                             {"from": "gpt", "value": "the cat sat on the hat and the cat sat on the mat"}]},
          {"instruction": "count", "response": "one two three four five six"},
          {"text": "the cat sat on the mat again"}]


def test_trie_keeps_every_prefix_once_and_cuts_without_orphans():
    draft = trie_from_paths([[5, 6, 7], [5, 6, 8], [5, 9], [4]], max_nodes=10)
    assert draft.tokens == [4, 5, 6, 9, 7, 8] and draft.parents == [-1, -1, 1, 1, 2, 2]
    cut = trie_from_paths([[5, 6, 7], [5, 6, 8], [5, 9], [4]], max_nodes=3)
    assert cut.tokens == [4, 5, 6] and cut.parents == [-1, -1, 1]
    assert len(trie_from_paths([[1, 2]], 0)) == 0


def test_texts_come_from_conversations_and_text_columns():
    assert store.texts_of(CORPUS[0]) == ["the cat sat on the mat", "the cat sat on the hat and the cat sat on the mat"]
    assert store.texts_of(CORPUS[1]) == ["count", "one two three four five six"]
    assert store.texts_of({"turns": ["a b", ""], "id": 3}) == ["a b"]


def test_build_indexes_the_corpus_and_retrieval_finds_its_continuations(tiny_tok, tmp_path):
    import draftretriever

    meta = store.build(CORPUS, tiny_tok, tmp_path / "ds", ["corpus"])
    assert meta["entries"] == 4 and meta["tokenizer"]["sha256"] == store.tokenizer_fingerprint(tiny_tok)["sha256"]
    assert store.read_meta(tmp_path / "ds") == meta
    ids = tiny_tok("the cat sat on the", add_special_tokens=False)["input_ids"]
    paths = draftretriever.Reader(str(tmp_path / "ds" / store.INDEX)).search(ids[-3:], k=100, choices=8, long=3)[0]
    following = {tuple(t for t in p if t != -2)[:1] for p in paths}
    want = {tuple(tiny_tok(" " + w, add_special_tokens=False)["input_ids"][:1]) for w in ("mat", "hat")}
    assert want <= following | {tuple(tiny_tok(w, add_special_tokens=False)["input_ids"][:1]) for w in ("mat", "hat")}


def test_damaged_or_foreign_datastores_are_refused(tiny_tok, tmp_path):
    store.build(CORPUS, tiny_tok, tmp_path / "ds", ["corpus"])
    meta = store.read_meta(tmp_path / "ds")
    with pytest.raises(UsageError, match="128-token vocabulary .*the target declares 49152"):
        store.check_vocab_size(meta, tmp_path / "ds", 49152)
    store.check_vocab_size(meta, tmp_path / "ds", meta["tokenizer"]["vocab_size"] + 3)  # padded embedding: fine
    foreign = dict(meta, tokenizer=dict(meta["tokenizer"], sha256="0" * 64))
    with pytest.raises(UsageError, match="another tokenizer"):
        store.check_tokenizer(foreign, tmp_path / "ds", tiny_tok)
    with open(tmp_path / "ds" / store.INDEX, "ab") as f:
        f.write(b"\0\0\0\0")
    with pytest.raises(UsageError, match="damaged or replaced index"):
        store.read_meta(tmp_path / "ds")
    (tmp_path / "ds" / store.META).write_text("[]")
    with pytest.raises(UsageError, match="not a specbench datastore record"):
        store.read_meta(tmp_path / "ds")
    with pytest.raises(UsageError, match="not a folder"):
        store.read_meta(tmp_path / "nowhere")


def _cli_store(tmp_path, vocab_size=None):
    """A datastore folder whose record claims `vocab_size` (no tokenizer needed)."""
    from specbench_cli.methods.retrieval.datastore import write

    class Tok:
        name_or_path = "fake"

        def get_vocab(self):
            return {f"t{i}": i for i in range(vocab_size or 100)}

        def __len__(self):
            return vocab_size or 100

    write([[1, 2, 3, 4]], Tok(), tmp_path / "foreign", ["x"])
    return tmp_path / "foreign"


@pytest.mark.parametrize("args, message", [
    (["--methods", "rest"], "method rest needs a datastore"),
    (["--methods", "rest", "-o", "rest.datastore={tmp}/missing"], "not a folder"),
    (["--methods", "rest", "-o", "rest.datastore={foreign}"], "32000-token vocabulary"),
    (["--methods", "rest", "-o", "rest.datastore={foreign}", "-o", "rest.min_span=9", "-o", "rest.max_span=3"],
     "min_span <= max_span"),
])
def test_run_refuses_a_bad_datastore_before_the_model_loads(args, message, tmp_path, capsys):
    from helpers.cli import cli

    foreign = _cli_store(tmp_path, 32000)
    code, _, err = cli(["run", *[a.format(tmp=tmp_path, foreign=foreign) for a in args]], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_run_refuses_another_tokenizers_datastore_after_the_tokenizer_loads(tiny_model_dir, tmp_path, capsys):
    from helpers.cli import cli, tiny_run_args

    foreign = _cli_store(tmp_path, None)
    args = tiny_run_args(tiny_model_dir, tmp_path / "runs")
    args[args.index("ar,pld")] = "ar,rest"
    code, _, err = cli([*args, "-o", f"rest.datastore={foreign}"], capsys)
    assert code == 2 and "another tokenizer" in err, err


def test_datastore_build_command(tiny_model_dir, tmp_path, capsys):
    from helpers.cli import cli

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in CORPUS))
    out = tmp_path / "ds"
    code, _, err = cli(["datastore", "build", "--from", str(corpus), "--out", str(out), "--model",
                        str(tiny_model_dir)], capsys)
    assert code == 0, err
    assert store.read_meta(out)["entries"] == 4
    code, _, err = cli(["datastore", "build", "--from", str(corpus), "--out", str(out), "--model",
                        str(tiny_model_dir)], capsys)
    assert code == 2 and "--force" in err
    code, _, err = cli(["datastore", "build", "--from", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "x")],
                       capsys)
    assert code == 2 and "file not found" in err and not (tmp_path / "x").exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"id": 1}) + "\n")
    code, _, err = cli(["datastore", "build", "--from", str(empty), "--out", str(tmp_path / "y"), "--model",
                        str(tiny_model_dir)], capsys)
    assert code == 2 and "no text to index" in err and not (tmp_path / "y").exists()


FUZZ = """
import random, sys
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.rest import REST
random.seed(0)
for budget in (2, 3, 4, 6, 10, 30, 60):
    m = REST(MethodContext(budget=budget), datastore=sys.argv[1])
    m.setup()
    for _ in range(300):
        q = [random.randrange(12) for _ in range(random.randint(2, 16))]
        m._search(q, random.randint(1, 64))
print("ok")
"""


def test_retrieval_never_aborts_the_process(tiny_tok, tmp_path):
    """draftretriever 0.1.1 panics (aborting Python) on 1-token queries, on some queries at
    choices=1, and when its cut leaves no path; `rest` keeps every search out of those cases."""
    import random
    import subprocess
    import sys

    rng = random.Random(1)
    seqs = [[rng.randrange(12) for _ in range(rng.randint(2, 40))] for _ in range(60)]
    store.write(seqs, tiny_tok, tmp_path / "ds", ["random"])
    res = subprocess.run([sys.executable, "-c", FUZZ, str(tmp_path / "ds")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


def _damage(folder, how: str) -> None:
    """Damage a (trigram-format) index in place, keeping its size (the record stays intact)."""
    import random
    import struct

    index = folder / store.INDEX
    raw = bytearray(index.read_bytes())
    # u64 pairs; pair 0: i32 a, i32 b, u64 m, then m x (i32 token, f32 share)
    first_token, first_share = 24, 28
    if how == "random":
        raw = bytearray(random.Random(5).randbytes(len(raw)))
    elif how == "count":  # one pair more than the file holds
        raw[:8] = struct.pack("<Q", struct.unpack("<Q", raw[:8])[0] + 1)
    elif how == "key":  # a pair token past the vocabulary
        raw[8:12] = struct.pack("<i", 10 ** 6)
    elif how == "token":  # a successor token below zero
        raw[first_token:first_token + 4] = struct.pack("<i", -1)
    elif how == "nan":  # the Reader sorts shares and panics on NaN
        raw[first_share:first_share + 4] = struct.pack("<f", float("nan"))
    elif how == "share":  # a share no Writer writes
        raw[first_share:first_share + 4] = struct.pack("<f", 7.0)
    elif how == "successors":  # pair 0 claims more successors than the file holds
        raw[16:24] = struct.pack("<Q", 10 ** 9)
    index.write_bytes(bytes(raw))


@pytest.mark.parametrize("how, message", [
    ("random", "claims"), ("count", "(token pairs, more than|ends inside pair)"), ("key", "token pair holds ids outside the 128-token"),
    ("token", "successor id is outside"), ("nan", "share is not a number in"), ("share", "share is not a number in"),
    ("successors", "claims 1000000000 successors"),
])
def test_a_damaged_index_is_refused_before_the_library_opens_it(how, message, tiny_tok, tmp_path):
    if store.index_format() != "trigram":
        pytest.skip("the installed draftretriever writes another index format")
    store.build(CORPUS, tiny_tok, tmp_path / "ds", ["corpus"])
    meta = store.read_meta(tmp_path / "ds")
    store.check_index(tmp_path / "ds", meta)  # as built: valid
    _damage(tmp_path / "ds", how)
    meta = store.read_meta(tmp_path / "ds")  # the size is intact: the record alone cannot tell
    with pytest.raises(UsageError, match=f"datastore.idx is damaged .*{message}"):
        store.check_index(tmp_path / "ds", meta)


def _suffix_array_index(chunks: list[list[int]]) -> bytes:
    """The REST repository's index layout, built here: per chunk its tokens and suffix array."""
    import struct

    out = b""
    for tokens in chunks:
        sa = sorted(range(len(tokens)), key=lambda i: tokens[i:])
        out += struct.pack(f"<I{len(tokens)}i", 4 * len(tokens), *tokens)
        out += struct.pack(f"<I{len(sa)}i", 4 * len(sa), *sa)
    return out


@pytest.mark.parametrize("damage, message", [
    (None, None), ("swap", "not in suffix order"), ("repeat", "repeats positions"), ("outside", "points outside"),
    ("token", "token ids outside the 50-token vocabulary"), ("length", "claims"),
])
def test_the_suffix_array_layout_is_validated_too(damage, message, tmp_path, monkeypatch):
    """With the REST repository's build of draftretriever (suffix arrays), the same promise."""
    import struct

    monkeypatch.setattr(store, "_FORMAT", "suffix-array")
    raw = bytearray(_suffix_array_index([[5, 3, 5, 3, 9, 1, 5], [7, 7, 7, 2]]))
    sa0 = 4 + 4 * 7 + 4  # the first chunk's suffix array
    if damage == "swap":
        raw[sa0:sa0 + 8] = raw[sa0 + 4:sa0 + 8] + raw[sa0:sa0 + 4]
    elif damage == "repeat":
        raw[sa0 + 4:sa0 + 8] = raw[sa0:sa0 + 4]
    elif damage == "outside":
        raw[sa0:sa0 + 4] = struct.pack("<i", 7)
    elif damage == "token":
        raw[4:8] = struct.pack("<i", 50)
    elif damage == "length":
        raw[0:4] = struct.pack("<I", 4000)
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / store.INDEX).write_bytes(bytes(raw))
    meta = {"tokenizer": {"vocab_size": 50}}
    if damage is None:
        store.check_index(folder, meta)
    else:
        with pytest.raises(UsageError, match=f"datastore.idx is damaged .*{message}"):
            store.check_index(folder, meta)


def test_random_index_bytes_never_abort_the_process(tmp_path):
    """The whole command in its own process: a datastore whose index holds random bytes (record
    and size intact) is one line and exit 2 before the target loads, never the abort (exit 134)
    the draftretriever extension ends the process with when it trusts such an index."""
    import random
    import subprocess
    import sys

    folder = _cli_store(tmp_path, 49152)  # the default target's vocabulary: only the index is wrong
    index = folder / store.INDEX
    index.write_bytes(random.Random(11).randbytes(index.stat().st_size))
    res = subprocess.run([sys.executable, "-m", "specbench_cli", "run", "--methods", "rest", "-o",
                          f"rest.datastore={folder}", "--output-dir", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=120)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and "datastore.idx is damaged" in lines[0] and not (tmp_path / "runs").exists()
