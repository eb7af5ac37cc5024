"""REST's datastore: token sequences of a text corpus, indexed by `draftretriever` (the REST
authors' suffix-array library), plus a JSON record of what it was built from.

A datastore is a folder:
    datastore.idx    draftretriever's index (chunks of int32 tokens and their suffix arrays)
    datastore.json   {"format", "version", "tokenizer": {"vocab_size", "sha256", "name"},
                      "sources", "entries", "tokens", "index_bytes"}

`tokenizer.sha256` fingerprints the vocabulary (every token string and its id), so a datastore
built with another tokenizer is refused: before the target loads when the vocabulary sizes
differ (read from the model's header), after its tokenizer loads and before any decoding when
only the fingerprint does.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from specbench_cli.errors import UsageError

FORMAT = "specbench-rest-datastore"
VERSION = 1
INDEX, META = "datastore.idx", "datastore.json"
INSTALL = "pip install 'specbench-cli[rest]'"
# columns whose text goes into the datastore (a conversation's every message, or these fields)
TEXT_FIELDS = ("instruction", "prompt", "question", "input", "turns", "response", "output", "completion",
               "answer", "text")


def require_library():
    try:
        import draftretriever
    except ImportError:
        raise UsageError(f"rest retrieves drafts with the `draftretriever` library: {INSTALL}") from None
    return draftretriever


def tokenizer_fingerprint(tokenizer: Any) -> dict:
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode()).hexdigest()
    return {"vocab_size": len(vocab), "sha256": digest, "name": str(getattr(tokenizer, "name_or_path", ""))}


def texts_of(row: Any) -> list[str]:
    """The texts of one corpus row: a conversation's messages (ShareGPT from/value or
    role/content), else the string (or list-of-string) values of TEXT_FIELDS."""
    if isinstance(row, str):
        return [row] if row.strip() else []
    if not isinstance(row, dict):
        return []
    for key in ("conversations", "messages"):
        conv = row.get(key)
        if isinstance(conv, list):
            return [m.get("value", m.get("content")) for m in conv if isinstance(m, dict)
                    and isinstance(m.get("value", m.get("content")), str) and m.get("value", m.get("content")).strip()]
    out: list[str] = []
    for key in TEXT_FIELDS:
        v = row.get(key)
        if isinstance(v, str) and v.strip():
            out.append(v)
        elif isinstance(v, list):
            out += [t for t in v if isinstance(t, str) and t.strip()]
    return out


def build(rows: Iterable[Any], tokenizer: Any, out: Path, sources: list[str],
          on_row: Optional[Callable[[], None]] = None) -> dict:
    """Tokenise every text of `rows` (no special tokens) into a new datastore at `out`, written
    under a temporary name and renamed when complete. Returns its record."""

    def token_lists():
        for row in rows:
            for text in texts_of(row):
                yield tokenizer(text, add_special_tokens=False)["input_ids"]
            if on_row:
                on_row()

    return write(token_lists(), tokenizer, out, sources)


def write(token_lists: Iterable[list[int]], tokenizer: Any, out: Path, sources: list[str]) -> dict:
    """Index token sequences (each of 2 or more tokens; shorter ones are skipped) into a new
    datastore at `out` for `tokenizer`."""
    import os
    import shutil
    import tempfile

    draftretriever = require_library()
    seqs = (list(map(int, ids)) for ids in token_lists if len(ids) >= 2)
    first = next(seqs, None)
    if first is None:  # before the library's writer exists (it cannot be closed without writing)
        raise UsageError("the corpus has no text to index (expected conversations or text columns: "
                         f"{', '.join(TEXT_FIELDS)})")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; a datastore is a normal folder
    # positional path: the wheel on PyPI names it `file_path`, the repository `index_file_path`
    writer = draftretriever.Writer(str(tmp / INDEX), vocab_size=len(tokenizer) + 1)
    entries = tokens = 0
    try:
        for ids in itertools.chain([first], seqs):
            writer.add_entry(ids)
            entries += 1
            tokens += len(ids)
    except BaseException:
        # closed while its folder exists: the library aborts the process if it has to close a
        # writer whose file is gone
        writer.finalize()
        del writer
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    writer.finalize()
    del writer
    try:
        meta = {"format": FORMAT, "version": VERSION, "tokenizer": tokenizer_fingerprint(tokenizer),
                "sources": sources, "entries": entries, "tokens": tokens,
                "index_bytes": (tmp / INDEX).stat().st_size}
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        return meta
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_meta(folder: Path) -> dict:
    """The datastore's record, checked against its index file; UsageError naming what is wrong."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise UsageError(f"rest datastore {folder}: not a folder (build one with `specbench datastore build`)")
    meta_path, index = folder / META, folder / INDEX
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"rest datastore {folder}: no {META} (build one with `specbench datastore build`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{meta_path}: not readable JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UsageError(f"{meta_path}: not a specbench REST datastore record")
    if meta.get("version") != VERSION:
        raise UsageError(f"{meta_path}: datastore version {meta.get('version')!r}; this specbench reads {VERSION}")
    tok = meta.get("tokenizer")
    if not isinstance(tok, dict) or not isinstance(tok.get("vocab_size"), int) or not isinstance(tok.get("sha256"), str):
        raise UsageError(f"{meta_path}: 'tokenizer' must hold vocab_size (int) and sha256 (str)")
    if not index.is_file():
        raise UsageError(f"rest datastore {folder}: {INDEX} is missing")
    if index.stat().st_size != meta.get("index_bytes"):
        raise UsageError(f"rest datastore {folder}: {INDEX} has {index.stat().st_size} bytes, the record says "
                         f"{meta.get('index_bytes')} (a damaged or replaced index)")
    return meta


def check_vocab_size(meta: dict, folder: Path, declared: Optional[int]) -> None:
    """Before the target loads: the vocabulary size the model's header declares (None: unknown)."""
    have = meta["tokenizer"]["vocab_size"]
    if declared is not None and declared != have and not (have <= declared <= have + 512):
        raise UsageError(f"rest datastore {folder} was built with a {have}-token vocabulary "
                         f"({meta['tokenizer'].get('name') or 'another tokenizer'}); the target declares {declared}: "
                         f"rebuild it with `specbench datastore build --model TARGET`")


def check_tokenizer(meta: dict, folder: Path, tokenizer: Any) -> None:
    """After the tokenizer loads, before decoding: the exact vocabulary."""
    mine = tokenizer_fingerprint(tokenizer)
    if mine["sha256"] != meta["tokenizer"]["sha256"]:
        raise UsageError(f"rest datastore {folder} was built with another tokenizer "
                         f"({meta['tokenizer'].get('name') or '?'}, {meta['tokenizer']['vocab_size']} tokens) than "
                         f"the target's ({mine['name']}, {mine['vocab_size']} tokens): rebuild it with "
                         f"`specbench datastore build --model TARGET`")
