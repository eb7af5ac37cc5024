"""The native forward's library: `forward.c` compiled once per machine, loaded with ctypes.

Built at first use with the system's C compiler (`$CC`, else `cc`/`gcc`) and OpenMP, for the
instruction set torch itself runs (`torch.backends.cpu.get_cpu_capability()`: AVX-512, AVX2 or
the baseline), so `ATEN_CPU_CAPABILITY=avx2` on an AVX-512 machine measures the AVX2 case for
this library too. The shared object is cached under `<cache>/native/`, named by a hash of the
source, the compiler and the flags; it is written to a temporary file and renamed into place,
and a cached file that is a link, or not the size and hash recorded beside it, is built again.
No compiler, or a failed build: `load()` returns None with the reason, and the caller says once
that the slower forward runs instead.

The library links the OpenMP runtime by its soname (`libgomp.so.1`), which resolves to the one
torch already loaded, so the library's threads are torch's: one pool, `torch.set_num_threads`
applies to both, and no two pools fight over the cores.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

SOURCE = Path(__file__).with_name("forward.c")
_lock = threading.Lock()
_loaded: dict[str, tuple[Optional[ctypes.CDLL], str]] = {}


def isa_flags() -> tuple[str, list[str]]:
    """(torch's CPU capability, the compiler flags for it; `SPECBENCH_NATIVE_PROFILE=1` adds the
    per-phase timers `forward.c` reads out as `sb_profile`)."""
    import torch

    cap = str(torch.backends.cpu.get_cpu_capability()).upper()
    extra = ["-DSB_PROFILE"] if os.environ.get("SPECBENCH_NATIVE_PROFILE") == "1" else []
    return cap, extra + _flags(cap)


def _flags(cap: str) -> list[str]:
    if cap.startswith("AVX512"):
        return ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mavx2",
                     "-mprefer-vector-width=512"]
    if cap.startswith("AVX2"):
        return ["-mavx2", "-mfma", "-mf16c"]
    return []


def compiler() -> Optional[str]:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cached(lib: Path, record: Path) -> bool:
    """The cached library is ours: plain files (no links), size and hash as recorded."""
    try:
        if lib.is_symlink() or record.is_symlink() or not lib.is_file() or not record.is_file():
            return False
        want = json.loads(record.read_text(encoding="utf-8"))
        return lib.stat().st_size == want.get("size") and _sha(lib) == want.get("sha256")
    except (OSError, ValueError, AttributeError):
        return False


def _build(cc: str, flags: list[str], lib: Path, record: Path) -> None:
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{lib.name}.", suffix=".tmp", dir=lib.parent)
    os.close(fd)
    try:
        argv = [cc, "-O3", "-std=gnu11", "-fPIC", "-shared", "-fopenmp", *flags, "-o", tmp, str(SOURCE), "-lm"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"the C compiler failed: {last}")
        info = {"size": os.path.getsize(tmp), "sha256": _sha(Path(tmp))}
        rec_tmp = tmp + ".json"
        with open(rec_tmp, "x", encoding="utf-8") as f:
            json.dump(info, f)
        os.replace(tmp, lib)
        os.replace(rec_tmp, record)
        _forget_others(lib)
    finally:
        for p in (tmp, tmp + ".json"):
            if os.path.lexists(p):
                os.unlink(p)


def _forget_others(lib: Path) -> None:
    """Remove libraries of other sources for the same instruction set (an upgrade's leftovers);
    only plain files named as this module names them."""
    prefix = lib.name.split("-")[0] + "-" + lib.name.split("-")[1] + "-"
    for other in lib.parent.glob(prefix + "*"):
        if other.name.startswith(lib.stem) or other.is_symlink() or not other.is_file():
            continue
        if other.suffix in (".so", ".json"):
            try:
                other.unlink()
            except OSError:
                pass


def load(cache_dir: Path) -> tuple[Optional[ctypes.CDLL], str]:
    """(the library, "") or (None, why it is unavailable); built into `cache_dir` when missing.
    One attempt per process and instruction set."""
    cap, flags = isa_flags()
    label = cap.lower() + ("profile" if "-DSB_PROFILE" in flags else "")
    with _lock:
        if label in _loaded:
            return _loaded[label]
        result: tuple[Optional[ctypes.CDLL], str]
        cc = compiler()
        if cc is None:
            result = (None, "no C compiler found (set CC, or install gcc)")
        else:
            key = hashlib.sha256(json.dumps([SOURCE.read_text(encoding="utf-8"), _version(cc), flags]).encode())
            lib = Path(cache_dir) / f"forward-{label}-{key.hexdigest()[:16]}.so"
            record = lib.with_suffix(".json")
            try:
                if not _cached(lib, record):
                    _build(cc, flags, lib, record)
                result = (_bind(ctypes.CDLL(str(lib))), "")
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                result = (None, str(e).splitlines()[0] if str(e) else type(e).__name__)
        _loaded[label] = result
        return result


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    i64, p, f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
    lib.sb_packed_size.argtypes, lib.sb_packed_size.restype = [i64, i64], i64
    lib.sb_pack.argtypes, lib.sb_pack.restype = [p, i64, i64, p], None
    lib.sb_linear.argtypes, lib.sb_linear.restype = [p, p, i64, i64, i64, p], None
    lib.sb_read.argtypes, lib.sb_read.restype = [p, i64], ctypes.c_double
    lib.sb_model_new.argtypes = [i64, i64, i64, i64, i64, i64, f64, f64, p, p]
    lib.sb_model_new.restype = p
    lib.sb_model_free.argtypes, lib.sb_model_free.restype = [p], None
    lib.sb_forward.argtypes = [p, i64, i64, p, p, p, p, i64, i64, p, i64, p]
    lib.sb_forward.restype = ctypes.c_int
    return lib
