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
    with pytest.raises(UsageError, match="not a specbench REST datastore"):
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
