"""Where llama.cpp's build is: `--engine-bin` (the `llama-server` binary, or the build's folder),
$SPECBENCH_LLAMA_CPP, the default prefix of tools/build-llama-cpp.sh, then PATH.

A build prefix holds bin/llama-server and lib/libllama.so (tools/build-llama-cpp.sh lays it out
so); a bare `llama-server` on PATH is used for servers only (no libllama beside it is needed)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from specbench_cli.errors import UsageError

LLAMA_CPP_VERSION = "0.3.36"  # llama-cpp-python's sdist whose vendored llama.cpp tree is built
DEFAULT_PREFIX = Path.home() / ".cache" / "specbench" / f"llama.cpp-{LLAMA_CPP_VERSION}"
INSTALL_HINT = ("build it with tools/build-llama-cpp.sh (about 11 minutes on 2 cores) and pass "
                "--engine-bin PREFIX or set SPECBENCH_LLAMA_CPP=PREFIX")


@dataclass(frozen=True)
class LlamaCpp:
    server: Optional[Path]     # the llama-server binary
    library: Optional[Path]    # libllama.so
    prefix: Optional[Path]     # the build prefix (None for a bare binary on PATH)


def _from_prefix(prefix: Path) -> Optional[LlamaCpp]:
    prefix = prefix.expanduser()
    server = prefix / "bin" / "llama-server"
    libs = sorted((prefix / "lib").glob("libllama.so*")) if (prefix / "lib").is_dir() else []
    if not server.is_file() and not libs:
        return None
    return LlamaCpp(server if server.is_file() else None, libs[0] if libs else None, prefix)


def find_llama_cpp(engine_bin: Optional[str] = None) -> Optional[LlamaCpp]:
    """The first llama.cpp found (module doc), or None."""
    if engine_bin:
        p = Path(engine_bin).expanduser()
        if p.is_dir():
            return _from_prefix(p)
        if p.is_file():
            found = _from_prefix(p.parent.parent) if p.parent.name == "bin" else None
            return LlamaCpp(p, found.library if found else None, found.prefix if found else None)
        return None
    env = os.environ.get("SPECBENCH_LLAMA_CPP")
    for prefix in ([Path(env)] if env else []) + [DEFAULT_PREFIX]:
        found = _from_prefix(prefix)
        if found is not None:
            return found
    on_path = shutil.which("llama-server")
    return LlamaCpp(Path(on_path), None, None) if on_path else None


def require_llama_cpp(engine_bin: Optional[str] = None, *, library: bool = False) -> LlamaCpp:
    """`find_llama_cpp`, or UsageError (one line, exit 2) naming the install step."""
    found = find_llama_cpp(engine_bin)
    what = "libllama.so" if library else "llama-server"
    if found is None or (library and found.library is None) or (not library and found.server is None):
        where = f" at {engine_bin}" if engine_bin else ""
        raise UsageError(f"llama.cpp's {what} not found{where}: {INSTALL_HINT}")
    return found
