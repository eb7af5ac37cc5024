"""A retrieval datastore: the token sequences of a text corpus, indexed by `draftretriever` (the
REST authors' suffix-array library) for `rest`, and kept as plain arrays for the drafters that
build their own structure over them (`samd`'s static automaton, `suffix`'s global tree), plus a
JSON record of what it was built from.

A datastore is a folder:
    datastore.json   {"format", "version", "tokenizer": {"vocab_size", "sha256", "name"},
                      "sources", "entries", "tokens", "index_bytes", "tokens_bytes"}
    tokens.npy       every sequence's tokens, one after another (int32; version 2)
    lengths.npy      each sequence's length (int64; version 2)
    datastore.idx    draftretriever's index, as the installed library writes it (`index_format`);
                     only when the library was installed at build time (`index_bytes` null otherwise)

Version 1 datastores (an index, no arrays) still serve `rest`.

`tokenizer.sha256` fingerprints the vocabulary (every token string and its id), so a datastore
built with another tokenizer is refused: before the target loads when the vocabulary sizes
differ (read from the model's header), after its tokenizer loads and before any decoding when
only the fingerprint does.

The index itself is validated before the library opens it (`check_index`, one linear pass):
draftretriever trusts every length and value in it and aborts the whole process (a Rust panic)
on a damaged one, so lengths that do not add up to the file, a token outside the vocabulary, or
values its Writer never writes are one line, exit 2.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from specbench_cli.atomic import OutputFolder
from specbench_cli.errors import UsageError, check_not_special
from specbench_cli.jsonl import loads

FORMAT = "specbench-rest-datastore"
VERSION = 2
READS = (1, 2)
INDEX, META, TOKENS, LENGTHS = "datastore.idx", "datastore.json", "tokens.npy", "lengths.npy"
INSTALL = "pip install 'specbench-cli[rest]'"
# what `datastore build` writes (its record last); `write` replaces an earlier datastore by these names only
OUTPUT = OutputFolder("datastore build", "a datastore", META, (META, TOKENS, LENGTHS, INDEX))
# columns whose text goes into the datastore (a conversation's every message, or these fields)
# (`output_text`: the answers in a specbench run's samples.jsonl)
TEXT_FIELDS = ("instruction", "prompt", "question", "input", "turns", "response", "output", "completion",
               "answer", "text", "output_text")


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
    """Tokenise every distinct text of `rows` (no special tokens) into a new datastore at `out`,
    written under a temporary name and renamed when complete. Returns its record. A text seen
    before is skipped (a run's samples.jsonl holds the same answer once per lossless method)."""

    def token_lists():
        seen: set = set()
        for row in rows:
            for text in texts_of(row):
                key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
                if key not in seen:
                    seen.add(key)
                    yield tokenizer(text, add_special_tokens=False)["input_ids"]
            if on_row:
                on_row()

    return write(token_lists(), tokenizer, out, sources)


def has_library() -> bool:
    try:
        import draftretriever  # noqa: F401
    except ImportError:
        return False
    return True


def write(token_lists: Iterable[list[int]], tokenizer: Any, out: Path, sources: list[str],
          index: Optional[bool] = None) -> dict:
    """Store token sequences (each of 2 or more tokens; shorter ones are skipped) as a new
    datastore at `out` for `tokenizer`; with `index` (default: when draftretriever is installed)
    also draftretriever's index for `rest`. Written into a fresh folder beside `out` and put in
    its place when complete: an earlier datastore there is replaced name by name, a folder
    holding other files or a link at `out` refused (atomic.py `install_folder`)."""
    import os
    import shutil
    import tempfile

    import numpy as np

    from specbench_cli.atomic import install_folder

    index = has_library() if index is None else index
    draftretriever = require_library() if index else None
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
    writer = draftretriever.Writer(str(tmp / INDEX), vocab_size=len(tokenizer) + 1) if index else None
    chunks: list[list[int]] = []
    try:
        for ids in itertools.chain([first], seqs):
            if writer is not None:
                writer.add_entry(ids)
            chunks.append(ids)
    except BaseException:
        # closed while its folder exists: the library aborts the process if it has to close a
        # writer whose file is gone
        if writer is not None:
            writer.finalize()
            del writer
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if writer is not None:
        writer.finalize()
        del writer
    try:
        lengths = np.array([len(c) for c in chunks], dtype=np.int64)
        np.save(tmp / TOKENS, np.fromiter(itertools.chain.from_iterable(chunks), dtype=np.int32,
                                          count=int(lengths.sum())))
        np.save(tmp / LENGTHS, lengths)
        meta = {"format": FORMAT, "version": VERSION, "tokenizer": tokenizer_fingerprint(tokenizer),
                "sources": sources, "entries": len(chunks), "tokens": int(lengths.sum()),
                "index_bytes": (tmp / INDEX).stat().st_size if index else None,
                "tokens_bytes": (tmp / TOKENS).stat().st_size}
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        try:  # an earlier datastore replaced name by name; never a folder holding other files, or a link
            install_folder(tmp, out, OUTPUT)
        except FileExistsError as e:
            raise UsageError(f"datastore {e}") from None
        return meta
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_meta(folder: Path, index: bool = True, who: str = "rest") -> dict:
    """The datastore's record, checked against its index file (`index`: `rest` searches it) or
    against its token arrays (otherwise: a drafter that reads the sequences); UsageError naming
    what is wrong, for the method `who`."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise UsageError(f"{who} datastore {folder}: not a folder (build one with `specbench datastore build`)")
    meta_path = folder / META
    for path in (meta_path, folder / INDEX, folder / TOKENS, folder / LENGTHS):
        check_not_special(path, f"{who} datastore {folder}:")
    try:
        meta = loads(meta_path.read_text(encoding="utf-8"), str(meta_path))
    except FileNotFoundError:
        raise UsageError(f"{who} datastore {folder}: no {META} (build one with `specbench datastore build`)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{meta_path}: not readable JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UsageError(f"{meta_path}: not a specbench datastore record")
    if meta.get("version") not in READS:
        raise UsageError(f"{meta_path}: datastore version {meta.get('version')!r}; this specbench reads "
                         f"{', '.join(map(str, READS))}")
    tok = meta.get("tokenizer")
    if not isinstance(tok, dict) or not isinstance(tok.get("vocab_size"), int) or not isinstance(tok.get("sha256"), str):
        raise UsageError(f"{meta_path}: 'tokenizer' must hold vocab_size (int) and sha256 (str)")
    if index:
        path = folder / INDEX
        if meta.get("index_bytes") is None:
            raise UsageError(f"{who} datastore {folder} was built without draftretriever's index: {INSTALL}, "
                             f"then build it again")
        if not path.is_file():
            raise UsageError(f"{who} datastore {folder}: {INDEX} is missing")
        if path.stat().st_size != meta.get("index_bytes"):
            raise UsageError(f"{who} datastore {folder}: {INDEX} has {path.stat().st_size} bytes, the record says "
                             f"{meta.get('index_bytes')} (a damaged or replaced index)")
    else:
        if meta.get("version") < 2:
            raise UsageError(f"{who} datastore {folder} is a version-1 datastore without its token arrays: "
                             f"build it again with `specbench datastore build`")
        for name in (TOKENS, LENGTHS):
            if not (folder / name).is_file():
                raise UsageError(f"{who} datastore {folder}: {name} is missing")
        if (folder / TOKENS).stat().st_size != meta.get("tokens_bytes"):
            raise UsageError(f"{who} datastore {folder}: {TOKENS} has {(folder / TOKENS).stat().st_size} bytes, "
                             f"the record says {meta.get('tokens_bytes')} (a damaged or replaced file)")
    return meta


_SEQUENCES: dict = {}  # the last datastore's sequences: a run plans each method more than once


def load_sequences(folder: Path, meta: dict, who: str) -> list[list[int]]:
    """`read_sequences`, remembered for the process by both array files' paths, sizes and mtimes."""
    paths = [Path(folder).expanduser() / name for name in (TOKENS, LENGTHS)]
    key = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in paths)
    if key not in _SEQUENCES:
        _SEQUENCES.clear()
        _SEQUENCES[key] = read_sequences(folder, meta, who)
    return _SEQUENCES[key]


def read_sequences(folder: Path, meta: dict, who: str) -> list[list[int]]:
    """The datastore's token sequences, checked (no pickles; 1-D integer arrays whose headers
    match their files' sizes, lengths each at least 1 adding up to the tokens in exact integers,
    every id inside the vocabulary); UsageError naming what is wrong."""
    folder = Path(folder).expanduser()

    def bad(why: str) -> UsageError:
        return UsageError(f"{who} datastore {folder}: {why}; build it again with `specbench datastore build`")

    for name in (TOKENS, LENGTHS):  # both headers before either array is allocated
        check_npy(folder / name, bad)
    tokens, lengths = (load_npy(folder / name, bad) for name in (TOKENS, LENGTHS))
    counts = lengths.tolist()  # Python ints: a sum that wraps in int64 cannot pass for the token count
    if counts and min(counts) < 1:
        raise bad(f"{LENGTHS} holds a sequence length below 1")
    total = sum(counts)
    if len(counts) != meta.get("entries") or total != len(tokens) or len(tokens) != meta.get("tokens"):
        raise bad(f"{len(counts)} lengths adding up to {total} for {len(tokens)} tokens, the record "
                  f"says {meta.get('entries')} texts, {meta.get('tokens')} tokens")
    vocab = int(meta["tokenizer"]["vocab_size"])
    if len(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
        raise bad(f"a token id is outside the {vocab}-token vocabulary")
    flat = tokens.tolist()
    return [flat[e - n:e] for e, n in zip(itertools.accumulate(counts), counts)]


def check_npy(path: Path, bad: Callable[[str], UsageError]) -> None:
    """An .npy file's header checked before anything is allocated: format version 1 or 2, an
    integer dtype (never an object array: no pickle is read), one dimension whose length times
    the item size is exactly the bytes after the header (a header claiming 2^40 elements would
    ask for terabytes). UsageError through `bad` otherwise."""
    from numpy.lib import format as npy

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            version = npy.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version[0]}.{version[1]}")
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, _, dtype = read_header(f)
            offset = f.tell()
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        raise bad(f"{path.name} is not a readable .npy array ({_first_line(e)})") from None
    if dtype.kind not in "iu" or dtype.hasobject or dtype.itemsize > 8:
        raise bad(f"{path.name} holds {dtype} values, not integers")
    if len(shape) != 1:
        raise bad(f"{path.name} is a {len(shape)}-D array of shape {list(shape)}, not 1-D")
    if shape[0] * dtype.itemsize != size - offset:
        raise bad(f"{path.name}'s header claims {shape[0]} values of {dtype.itemsize} bytes, the file holds "
                  f"{size - offset} bytes after it (a damaged or hand-made file)")


def load_npy(path: Path, bad: Callable[[str], UsageError]) -> Any:
    """The array of an .npy file `check_npy` passed (no pickle)."""
    import numpy as np

    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, MemoryError) as e:
        raise bad(f"{path.name} does not read ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def index_format() -> str:
    """How the installed draftretriever writes an index, found by writing a three-token one:
    'trigram' (the PyPI wheel: a bincode map (token, token) -> {next token: probability}),
    'suffix-array' (the REST repository's library: chunks of int32 tokens and their suffix
    arrays), or 'unknown'."""
    global _FORMAT
    if _FORMAT is None:
        import struct
        import tempfile

        lib = require_library()
        with tempfile.TemporaryDirectory() as d:
            probe = str(Path(d) / "probe.idx")
            writer = lib.Writer(probe, vocab_size=8)
            writer.add_entry([1, 2, 3])
            writer.finalize()
            del writer  # inside the folder's life: the library aborts if it closes a writer whose file is gone
            raw = Path(probe).read_bytes()
        if raw == struct.pack("<QiiQif", 1, 1, 2, 1, 3, 1.0):
            _FORMAT = "trigram"
        elif raw[:16] == struct.pack("<Iiii", 12, 1, 2, 3):
            _FORMAT = "suffix-array"
        else:
            _FORMAT = "unknown"
    return _FORMAT


_FORMAT: Optional[str] = None
_VALID: set = set()


def check_index(folder: Path, meta: dict) -> None:
    """Validate `datastore.idx` in the format the installed library writes (`index_format`)
    before the library opens it: draftretriever trusts the file and aborts the whole process (a
    Rust panic) on a damaged one. One linear pass, remembered per file for the process;
    UsageError naming what is damaged. An index of an unknown format is opened and searched once
    in a child process instead, where an abort cannot take the run down."""
    path = Path(folder) / INDEX
    st = path.stat()
    size, vocab = st.st_size, int(meta["tokenizer"]["vocab_size"])
    key = (str(path.resolve()), size, st.st_mtime_ns, vocab)
    if key in _VALID:  # a run plans each method more than once (and `auto` at every candidate)
        return

    def damaged(why: str) -> UsageError:
        return UsageError(f"rest datastore {folder}: {INDEX} is damaged ({why}); rebuild it with "
                          f"`specbench datastore build`")

    if size == 0:
        raise damaged("it is empty")
    fmt = index_format()
    if fmt == "trigram":
        _check_trigram(path, size, vocab, damaged)
    elif fmt == "suffix-array":
        _check_suffix_array(path, size, vocab, damaged)
    else:
        _probe_in_child(path, damaged)
    _VALID.add(key)


def _check_trigram(path: Path, size: int, vocab: int, damaged: Callable[[str], UsageError]) -> None:
    """bincode of HashMap<(i32, i32), HashMap<i32, f32>> as the Writer leaves it: a u64 count of
    pairs; per pair two i32 tokens, a u64 count (>= 1) and that many (i32 token, f32 share);
    nothing after. Every token in [0, vocab); the pairs distinct; each share finite in (0, 1],
    a pair's shares summing to 1 (the Reader sorts them and panics on NaN)."""
    import struct

    import numpy as np

    data = path.read_bytes()
    if size < 8:
        raise damaged("shorter than its 8-byte header")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > (size - 8) // 24:
        raise damaged(f"it claims {n} token pairs, more than {size} bytes can hold")
    pairs, starts, counts = [], [], []
    pos = 8
    unpack = struct.Struct("<iiQ").unpack_from
    for i in range(n):
        if pos + 16 > size:
            raise damaged(f"it ends inside pair {i} of {n}")
        a, b, m = unpack(data, pos)
        pos += 16
        if m == 0 or pos + 8 * m > size:
            raise damaged(f"pair {i} claims {m} successors, the file has room for {(size - pos) // 8}")
        pairs.append((a, b))
        starts.append(pos)
        counts.append(m)
        pos += 8 * m
    if pos != size:
        raise damaged(f"{size - pos} bytes follow its last entry")
    if not n:
        return
    keys = np.array(pairs, dtype=np.int64)
    if int(keys.min()) < 0 or int(keys.max()) >= vocab:
        raise damaged(f"a token pair holds ids outside the {vocab}-token vocabulary")
    if len(np.unique(keys[:, 0] * vocab + keys[:, 1])) != n:
        raise damaged("a token pair appears twice")
    counts_a = np.array(counts, dtype=np.int64)
    first = np.cumsum(counts_a) - counts_a
    offsets = np.repeat(np.array(starts, dtype=np.int64) - 8 * first, counts_a) + 8 * np.arange(int(counts_a.sum()))
    raw = np.frombuffer(data, dtype=np.uint8)
    tokens = raw[offsets[:, None] + np.arange(4)].copy().view("<i4").ravel()
    shares = raw[offsets[:, None] + 4 + np.arange(4)].copy().view("<f4").ravel()
    if int(tokens.min()) < 0 or int(tokens.max()) >= vocab:
        raise damaged(f"a successor id is outside the {vocab}-token vocabulary")
    if not bool(np.isfinite(shares).all()) or not bool(((shares > 0) & (shares <= 1)).all()):
        raise damaged("a successor's share is not a number in (0, 1]")
    if not bool(np.allclose(np.add.reduceat(shares.astype(np.float64), first), 1.0, atol=1e-3)):
        raise damaged("a pair's successor shares do not sum to 1")


def _check_suffix_array(path: Path, size: int, vocab: int, damaged: Callable[[str], UsageError]) -> None:
    """Chunks as the repository's Reader walks them: a u32 byte count, that many bytes of int32
    tokens (each in [0, vocab)), a u32 count equal to it, and the chunk's suffix array: every
    position once, in suffix order (adjacent suffixes compared by first token, then by the rank
    of the suffix after it)."""
    import numpy as np

    raw = np.memmap(path, dtype=np.uint8, mode="r")
    pos, chunk = 0, 0
    while pos < size:
        counts = []
        for what in ("tokens", "suffix array"):
            if pos + 4 > size:
                raise damaged(f"chunk {chunk} ends inside the length of its {what}")
            n_bytes = int(np.frombuffer(raw, "<u4", count=1, offset=pos)[0])
            pos += 4
            if n_bytes % 4 or pos + n_bytes > size:
                raise damaged(f"chunk {chunk} claims {n_bytes} bytes of {what}, the file has {size - pos} left")
            counts.append((pos, n_bytes // 4))
            pos += n_bytes
        (t_at, n), (s_at, n_sa) = counts
        if n_sa != n:
            raise damaged(f"chunk {chunk} has {n} tokens but a suffix array of {n_sa}")
        if n:
            tokens = np.frombuffer(raw, "<i4", count=n, offset=t_at)
            sa = np.frombuffer(raw, "<i4", count=n, offset=s_at)
            if int(tokens.min()) < 0 or int(tokens.max()) >= vocab:
                raise damaged(f"chunk {chunk} holds token ids outside the {vocab}-token vocabulary")
            if int(sa.min()) < 0 or int(sa.max()) >= n:
                raise damaged(f"chunk {chunk}'s suffix array points outside its {n} tokens")
            seen = np.zeros(n, dtype=bool)
            seen[sa] = True
            if not seen.all():
                raise damaged(f"chunk {chunk}'s suffix array repeats positions")
            rank = np.empty(n + 1, dtype=np.int64)
            rank[sa] = np.arange(n)
            rank[n] = -1  # the empty suffix sorts first
            a, b = sa[:-1].astype(np.int64), sa[1:].astype(np.int64)
            ta, tb = tokens[a], tokens[b]
            if not bool(((ta < tb) | ((ta == tb) & (rank[a + 1] < rank[b + 1]))).all()):
                raise damaged(f"chunk {chunk}'s suffix array is not in suffix order")
        chunk += 1
    del raw


_PROBE = """
import sys, draftretriever
reader = draftretriever.Reader(sys.argv[1])
for query in ([1, 2], [3, 4, 5, 6]):
    try:
        reader.search(query, k=64, choices=8, long=4)
    except ValueError:
        pass
print("ok")
"""


def _probe_in_child(path: Path, damaged: Callable[[str], UsageError]) -> None:
    import subprocess
    import sys

    try:
        res = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise damaged("the library's reader did not open it in 10 minutes") from None
    if res.returncode != 0 or "ok" not in res.stdout:
        raise damaged(f"the library's reader failed on it, exit status {res.returncode}")


def open_for(who: str, datastore: str, target_ref: Any, index: bool) -> tuple[Path, dict]:
    """A method's datastore option checked before any model loads: the folder, its record (and
    index, or token arrays: `read_meta`) and the vocabulary size the target's header declares.
    Returns (folder, record)."""
    folder = Path(datastore).expanduser()
    meta = read_meta(folder, index=index, who=who)
    if target_ref:
        from specbench_cli.models.load import declared_vocab

        try:
            declared = declared_vocab(str(target_ref))
        except UsageError:
            declared = None  # the model reference itself is checked (and named) by the run
        check_vocab_size(meta, folder, declared)
    return folder, meta


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
