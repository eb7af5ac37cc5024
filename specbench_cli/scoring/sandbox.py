"""Run one untrusted Python program (model-written code) in a contained subprocess.

Callers must have the user's explicit opt-in (`--execute-code`); nothing here asks again.
The program runs through the launcher in jail.py, in layers (any one the kernel refuses is
skipped, and `Result.missing` names it so reports can say so):

- session: its own session and process group, killed as a group at the timeout;
- pid: PID 1 of its own PID namespace, so every process it starts (double-forked, setsid or
  not) is killed by the kernel when it ends, at the timeout, or if the caller dies;
- net: its own network namespace with the loopback down: no TCP or UDP, not even to 127.0.0.1,
  and no abstract UNIX socket outside it;
- mount / view / disk: a private filesystem view: the Python runtime read-only, four character
  devices, and a private tmpfs of `disk_mb` as its working folder (the total it can write);
  no host temporary folder, no home folder, no socket file of the machine;
- unprivileged: uid/gid 65534 and no capabilities, inside and out: a user namespace maps it to
  65534 (nobody) outside when the caller is root, to the caller's own uid otherwise;
- nproc: at most `nproc` processes; rlimits on address space (`memory_mb`), CPU seconds, file
  size, open files, no core dumps; a scrubbed environment and `python -I -S` (no PYTHON*
  variables, no site packages, so neither specbench nor the project's files are importable);
- landlock (kernel >= 5.13): it may read and execute only the Python installation and system
  libraries, write only its working folder, open no TCP connection, signal only itself.

HumanEval's own `execution.py` runs the code inside the calling process (with `exec`), which
is exactly what must not happen here; it is not used.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    passed: bool          # exit status 0 within the time limit
    status: str           # "passed" | "failed" | "timeout"
    returncode: int | None
    output: str           # the last 2,000 characters of stdout + stderr
    landlock: bool        # the Landlock filesystem layer was active
    missing: tuple = ()   # layers (LAYERS) the kernel refused for this run


LAYERS = ("session", "pid", "net", "mount", "view", "disk", "unprivileged", "nproc", "landlock")


def _landlock_abi() -> int:
    if not sys.platform.startswith("linux"):
        return 0
    from specbench_cli.scoring.jail import landlock_abi

    return landlock_abi()


def _read_roots() -> list[str]:
    """What the interpreter needs to start: its installation and the system libraries (and,
    for a path that is a symbolic link such as /lib -> usr/lib, where it leads)."""
    roots = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             sysconfig.get_paths()["stdlib"], "/usr/lib", "/usr/lib64", "/lib", "/lib64",
             "/etc/ld.so.cache", "/etc/localtime", "/dev/null", "/dev/urandom"}
    roots |= {os.path.realpath(r) for r in roots if r}
    return sorted(r for r in roots if r and os.path.exists(r))


def _pids_cgroup(nproc: int) -> Path | None:
    """A pids cgroup capped at `nproc` (root only: RLIMIT_NPROC never binds uid 0, which the
    program still is outside its user namespace); None where cgroups cannot be written."""
    if os.geteuid() != 0:
        return None
    v2 = Path("/sys/fs/cgroup")
    candidates = [Path("/sys/fs/cgroup/pids")]
    try:
        if "pids" in (v2 / "cgroup.subtree_control").read_text().split():
            candidates.append(v2)
    except OSError:
        pass
    for parent in candidates:
        group = parent / f"specbench-sandbox-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            (group / "pids.max").write_text(str(nproc))
            return group
        except OSError:
            group.rmdir()
    return None


def _remove_cgroup(group: Path) -> None:
    import time

    for _ in range(40):  # the kernel reaps the killed namespace asynchronously
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.05)


def run_untrusted(program: str, timeout: float = 10.0, memory_mb: int = 1024, landlock: bool = True,
                  disk_mb: int = 64, nproc: int = 32) -> Result:
    """Run `program` as `python -I -S prog.py` under every layer above; never raises for what
    the program does. `timeout` is wall-clock seconds."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError("running model-written code needs Linux (namespaces, rlimits, Landlock)")
    abi = _landlock_abi() if landlock else 0
    with tempfile.TemporaryDirectory(prefix="specbench-sandbox-") as base:
        os.chmod(base, 0o711)  # the program's uid may pass through to its folder, not list ours
        workdir = Path(base) / "work"
        workdir.mkdir()
        (Path(base) / "view").mkdir()  # where the launcher mounts the program's private root
        (workdir / "prog.py").write_text(program, encoding="utf-8")
        spec, layers_out = Path(base) / "spec.json", Path(base) / "layers.json"
        spec.write_text(json.dumps({
            "workdir": str(workdir), "python": os.path.realpath(sys.executable), "memory_mb": memory_mb,
            "cpu_s": int(timeout) + 1, "file_mb": min(16, disk_mb), "disk_mb": disk_mb, "nproc": nproc,
            "landlock_abi": abi, "read_roots": _read_roots(), "layers_out": str(layers_out),
            "view": str(Path(base) / "view")}))
        jail = Path(__file__).with_name("jail.py")
        group = _pids_cgroup(nproc + 1)  # + the launcher

        def join_group() -> None:  # in the launcher's process, before exec: its descendants inherit it
            if group is not None:
                (group / "cgroup.procs").write_text(str(os.getpid()))

        proc = subprocess.Popen([os.path.realpath(sys.executable), "-I", "-S", str(jail), str(spec)], cwd=base,
                                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True, preexec_fn=join_group if group is not None else None)
        try:
            out, _ = proc.communicate(timeout=timeout)
            status = "passed" if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            out, status = b"", "timeout"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher's group; its namespace dies with it
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        if group is not None:
            _remove_cgroup(group)
        try:
            layers = json.loads(layers_out.read_text())
        except (OSError, ValueError):
            layers = {}
        # RLIMIT_NPROC binds the program's uid outside unless that is root (a root caller
        # without user namespaces keeps the cgroup alone)
        layers["nproc"] = group is not None or os.geteuid() != 0 or bool(layers.get("unprivileged"))
        text = out.decode("utf-8", "replace")[-2000:]
    missing = tuple(name for name in LAYERS if not layers.get(name))
    return Result(status == "passed", status, proc.returncode, text, bool(layers.get("landlock")), missing)


def missing_layers() -> tuple[str, ...]:
    """The layers this machine cannot provide (runs a trivial program once)."""
    return run_untrusted("pass\n", timeout=10).missing
