"""Run one untrusted Python program (model-written code) in a contained subprocess.

Callers must have the user's explicit opt-in (`--execute-code`); nothing here asks again.
Each program gets, in layers (any one failing to apply on this OS leaves the others):

- its own process group in a fresh temporary directory (its cwd, HOME and TMPDIR), removed
  afterwards; a wall-clock timeout after which the whole group is SIGKILLed;
- a scrubbed environment (PATH only) and `python -I -S`: no PYTHON* variables, no user or
  site packages, so neither specbench nor the project's files are importable;
- resource limits (setrlimit): address space (`memory_mb`), CPU seconds, file size, open
  files, no core dumps;
- Linux Landlock (kernel >= 5.13, unprivileged): it may read and execute only the Python
  installation and system libraries, write only inside its temporary directory, open no
  TCP connection, and not signal processes outside itself. `Result.landlock` says whether
  this layer was active (it is not on kernels without Landlock; then files outside the
  temporary directory are protected only by ordinary permissions).

HumanEval's own `execution.py` runs the code inside the calling process (with `exec`), which
is exactly what must not happen here; it is not used.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Landlock ABI constants (include/uapi/linux/landlock.h).
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | (1 << 14) | (1 << 15)


@dataclass
class Result:
    passed: bool          # exit status 0 within the time limit
    status: str           # "passed" | "failed" | "timeout"
    returncode: int | None
    output: str           # the last 2,000 characters of stdout + stderr
    landlock: bool        # the filesystem/network layer was active


def _landlock_abi() -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return max(0, libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return 0


def _handled_fs(abi: int) -> int:
    bits = (1 << 13) - 1                    # ABI 1: execute .. make_sym
    if abi >= 2:
        bits |= 1 << 13                     # refer
    if abi >= 3:
        bits |= 1 << 14                     # truncate
    if abi >= 5:
        bits |= 1 << 15                     # ioctl_dev
    return bits


def _read_roots() -> list[str]:
    """What the interpreter needs to start: its installation and the system libraries."""
    roots = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             sysconfig.get_paths()["stdlib"], "/usr/lib", "/usr/lib64", "/lib", "/lib64",
             "/etc/ld.so.cache", "/etc/localtime", "/dev/null", "/dev/urandom"}
    return sorted(r for r in roots if r and os.path.exists(r))


def _apply_landlock(abi: int, workdir: str) -> None:
    """Restrict this (child) process before exec; raises OSError if the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    fs = _handled_fs(abi)

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)  # no TCP bind/connect; scoped signals
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    for path, allowed in [(p, read) for p in _read_roots()] + [(workdir, fs)]:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rights = allowed & (_FILE_RIGHTS if not os.path.isdir(path) else fs)
            rule = PathBeneath(rights & fs, fd)
            if libc.syscall(_SYS_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) < 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        finally:
            os.close(fd)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_SYS_RESTRICT, ruleset, 0) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)


def _limits(timeout: float, memory_mb: int) -> None:
    import resource

    mem = memory_mb * 1024 * 1024
    cpu = int(timeout) + 1
    for res, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, 16 << 20),
                       (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))


def run_untrusted(program: str, timeout: float = 10.0, memory_mb: int = 1024, landlock: bool = True) -> Result:
    """Run `program` as `python -I -S prog.py` under every layer above; never raises for what
    the program does. `timeout` is wall-clock seconds."""
    abi = _landlock_abi() if landlock and sys.platform.startswith("linux") else 0
    with tempfile.TemporaryDirectory(prefix="specbench-sandbox-") as workdir:
        script = Path(workdir) / "prog.py"
        script.write_text(program, encoding="utf-8")

        def prepare() -> None:  # runs in the child between fork and exec
            _limits(timeout, memory_mb)
            if abi:
                _apply_landlock(abi, workdir)

        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        proc = subprocess.Popen([os.path.realpath(sys.executable), "-I", "-S", str(script)], cwd=workdir, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=prepare, start_new_session=True, close_fds=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            status = "passed" if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            out, status = b"", "timeout"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # children it forked, too
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        text = out.decode("utf-8", "replace")[-2000:]
    return Result(status == "passed", status, proc.returncode, text, bool(abi))
