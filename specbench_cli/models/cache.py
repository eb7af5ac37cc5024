"""Cache entries (folders under `$SPECBENCH_CACHE/models`) built once, atomically, verified on use.

An entry is built by a caller-supplied function into a unique temp folder *next to* the final
one (`.NAME.tmp-XXXX`), every file is fsynced, a record of each file's size and sha256 is
written (`specbench_cache.json`), and the folder is renamed into place, all while holding an
exclusive `flock` on `.NAME.lock`. So:

- two first conversions at once: the second waits for the lock, then finds the entry built;
- a killed conversion leaves only its temp folder, removed by the next builder (a temp folder
  whose lock nobody holds belongs to a dead process);
- a damaged entry (file missing, size differs from the record, or a small file's hash differs)
  is reported in one line and rebuilt. Hashes of big files are checked only when
  `SPECBENCH_VERIFY_CACHE=1` (sha256 of a 540 MB model costs about a second; size catches the
  usual damage, truncation).

Entries written before records existed are adopted (recorded once) when every safetensors file
is structurally whole (header and data length agree), otherwise rebuilt.

The record is read defensively (a link, a file over 64 MB, JSON nested too deeply: damaged, so
rebuilt), and the lock file is never written through a link: a planted `.NAME.lock -> FILE` is
replaced by a lock file of our own. A cache folder that cannot be written (read-only, full) is one
warning line, and the entry is built in a temporary folder outside the cache for this process
only (removed when it exits).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import struct
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional

RECORD = "specbench_cache.json"


from specbench_cli.locate import cache_root  # noqa: E402,F401 - where it always was for callers

SMALL_FILE = 32 << 20  # files up to this size are always hash-checked on load


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != RECORD)


def write_record(folder: Path, fsync: bool = True) -> dict:
    """fsync every file of `folder` and record its size and sha256 in RECORD (also fsynced)."""
    files = {}
    for p in _files(folder):
        with open(p, "rb") as f:
            if fsync:
                os.fsync(f.fileno())
        files[p.relative_to(folder).as_posix()] = {"size": p.stat().st_size, "sha256": file_sha256(p)}
    record = {"format": 1, "files": files}
    with open(folder / RECORD, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    if fsync:
        _fsync_dir(folder)
    return record


def problem(entry: Path, deep: Optional[bool] = None) -> Optional[str]:
    """None when `entry` is whole; else a short reason ('missing', 'unrecorded', what differs).

    Sizes are always compared with the record; hashes for files up to SMALL_FILE, or for all
    files with `deep` (default: env SPECBENCH_VERIFY_CACHE=1)."""
    if deep is None:
        deep = os.environ.get("SPECBENCH_VERIFY_CACHE", "") == "1"
    if not entry.is_dir():
        return "missing"
    try:
        record = _read_record(entry / RECORD)
        files = record["files"]
    except FileNotFoundError:
        return "unrecorded"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return f"{RECORD} unreadable"
    if not isinstance(files, dict) or not files:
        return f"{RECORD} lists no files"
    for name, info in files.items():
        p = entry / name
        if not p.is_file():
            return f"{name} missing"
        size = p.stat().st_size
        if not isinstance(info, dict) or size != info.get("size"):
            return f"{name} is {size} bytes, recorded {info.get('size') if isinstance(info, dict) else '?'}"
        if (deep or size <= SMALL_FILE) and file_sha256(p) != info.get("sha256"):
            return f"{name} checksum differs from the record"
    return None


def _read_record(path: Path) -> dict:
    """The record's JSON, read as every cached document is (json_cache.read_document: a regular
    file, never through a link, bounded in size and nesting); FileNotFoundError when there is
    none, ValueError for anything else that is not a JSON object."""
    from specbench_cli.json_cache import read_document

    record = read_document(path)
    if record is None:
        raise FileNotFoundError(path)
    return record


def safetensors_whole(path: Path) -> bool:
    """True when a safetensors file's length is exactly 8 + header + the data its header names."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > size - 8:
                return False
            header = json.loads(f.read(n))
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        return 8 + n + max(ends, default=0) == size
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
        return False


def _legacy_whole(entry: Path) -> bool:
    tensors = list(entry.glob("*.safetensors"))
    return (entry / "config.json").is_file() and bool(tensors) and all(safetensors_whole(p) for p in tensors)


@contextlib.contextmanager
def locked(lock_path: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive flock on `lock_path` (created if needed; never deleted, so every process
    locks the same inode). Yields False instead of waiting when not `blocking` and it is held."""
    fd = _open_lock(lock_path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield True
    finally:
        os.close(fd)  # closing drops the lock


def _open_lock(lock_path: Path) -> int:
    """The lock file, opened without following a link: anything at its name that is not a regular
    file (a planted link, a FIFO) is removed and replaced by one of ours."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    for _ in range(10):
        try:
            fd = os.open(lock_path, flags, 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
        else:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
        lock_path.unlink(missing_ok=True)  # removes the link (or FIFO) itself, not what it names
    raise OSError(errno.ELOOP, f"{lock_path} keeps being replaced by a link")


def _lock_path(entry: Path) -> Path:
    return entry.parent / f".{entry.name}.lock"


def clean_stale(root: Path, own: Optional[Path] = None) -> list[Path]:
    """Remove temp folders of dead builders under `root`. `own` is the entry whose lock this
    process holds: its temp folders are stale by definition. Others are removed only when their
    lock can be taken at once (a live builder holds it). Returns what was removed."""
    removed = []
    for tmp in root.glob(".*.tmp-*"):
        name = tmp.name[1:].rsplit(".tmp-", 1)[0]
        entry = root / name
        if own is not None and entry == own:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
            continue
        with locked(_lock_path(entry), blocking=False) as got:
            if got:
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
    if own is not None:  # the fixed-name temp folder of specbench <= 0.1.0
        legacy = own.with_name(own.name + ".tmp")
        if legacy.is_dir():
            shutil.rmtree(legacy, ignore_errors=True)
            removed.append(legacy)
    return removed


def ensure_entry(entry: Path, build: Callable[[Path], None], say: Callable[[str], None] = print) -> Path:
    """Return `entry`, first building it with `build(temp_folder)` if it is missing or damaged.

    `build` writes the entry's files into the (empty) folder it is given. `say` gets one line
    when a damaged entry is rebuilt, or when the cache cannot be written: then the entry is built
    in a temporary folder of this process instead (`uncached`)."""
    if problem(entry) is None:
        return entry
    try:
        return _ensure_in_cache(entry, build, say)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        say(f"warning: cannot write the cache under {entry.parent} ({exc.strerror or exc}); building {entry.name} "
            f"in a temporary folder for this run only (set SPECBENCH_CACHE to a writable folder to keep it)")
    return uncached(entry, build)


UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR}


def uncached(entry: Path, build: Callable[[Path], None]) -> Path:
    """`entry` built in a private temporary folder, removed when the process exits."""
    import atexit

    tmp = Path(tempfile.mkdtemp(prefix=f"specbench-{entry.name}-"))
    atexit.register(shutil.rmtree, tmp, True)
    build(tmp)
    return tmp


def _ensure_in_cache(entry: Path, build: Callable[[Path], None], say: Callable[[str], None]) -> Path:
    entry.parent.mkdir(parents=True, exist_ok=True)
    with locked(_lock_path(entry)):
        why = problem(entry)  # another process may have built it while we waited
        if why is None:
            return entry
        if why == "unrecorded" and _legacy_whole(entry):
            write_record(entry)
            return entry
        if why != "missing":
            say(f"cache entry {entry} damaged ({why}); rebuilding")
        clean_stale(entry.parent, own=entry)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.tmp-", dir=entry.parent))
        try:
            build(tmp)
            os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
            write_record(tmp)
            if entry.exists():  # move the damaged entry aside first: the rename below must not fail
                trash = Path(tempfile.mkdtemp(prefix=f".{entry.name}.tmp-", dir=entry.parent))
                entry.rename(trash / "old")
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(tmp, entry)
            _fsync_dir(entry.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return entry
