"""The sandbox's launcher: run as `python -I -S jail.py SPEC.json` (standard library only, so it
needs no site-packages) by `sandbox.run_untrusted`, never imported by the tool itself.

It puts the untrusted program in fresh namespaces and drops every privilege before `exec`:

1. `unshare` a user, PID, network, mount, IPC and UTS namespace. The program is PID 1 of its PID namespace: when it ends, or when this launcher
   dies (PR_SET_PDEATHSIG), the kernel kills every process left in it, whatever session or
   group those moved to. The network namespace has only a loopback device that is down: no
   TCP, no UDP, not even to 127.0.0.1.
2. A tmpfs of `disk_mb` mounted over the working folder: the total the program can write.
3. The user namespace maps uid/gid 65534 inside to the caller outside, so the program holds no
   capability after `exec`, root caller or not (without user namespaces a root caller's child
   switches to uid/gid 65534 instead).
4. rlimits (address space, CPU, file size, open files, processes, no core dumps), then
   Landlock (read only the Python installation and system libraries, write only the working
   folder, no TCP, signals scoped to itself) when the kernel has it.

Layers the kernel refuses are skipped, not fatal; which ones applied is written to
`spec["layers_out"]` (JSON) before the program starts, for the caller to report.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
NOBODY = 65534

# Landlock ABI constants (include/uapi/linux/landlock.h).
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | (1 << 14) | (1 << 15)

libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def landlock_abi() -> int:
    try:
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


def apply_landlock(abi: int, read_roots: list[str], workdir: str) -> None:
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
    for path, allowed in [(p, read) for p in read_roots] + [(workdir, fs)]:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rights = allowed & (_FILE_RIGHTS if not os.path.isdir(path) else fs)
            rule = PathBeneath(rights & fs, fd)
            if libc.syscall(_SYS_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) < 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        finally:
            os.close(fd)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if libc.syscall(_SYS_RESTRICT, ruleset, 0) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)


def _unshare(flags: int) -> bool:
    return libc.unshare(ctypes.c_int(flags)) == 0


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def enter_namespaces(layers: dict) -> None:
    """Unshare what the kernel allows. The user namespace maps uid/gid 65534 inside to the
    caller outside: after `exec` the program holds no capability (not even in its namespace),
    root caller or not, while files it may read keep their ordinary owner checks."""
    uid, gid = os.getuid(), os.getgid()
    rest = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
    if _unshare(CLONE_NEWUSER | rest):
        layers.update(unprivileged=True, pid=True, net=True, mount=True)
    else:  # some kernels allow only part of it: take each namespace that is allowed
        layers["unprivileged"] = _unshare(CLONE_NEWUSER)
        for name, flag in (("pid", CLONE_NEWPID), ("net", CLONE_NEWNET), ("mount", CLONE_NEWNS)):
            layers[name] = _unshare(flag)
    if layers["unprivileged"]:
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{NOBODY} {uid} 1")
            _write("/proc/self/gid_map", f"{NOBODY} {gid} 1")
        except OSError:
            layers["unprivileged"] = False


def mount_workdir(workdir: str, disk_mb: int, program: bytes) -> bool:
    """A private tmpfs of disk_mb over workdir holding the program; False if mounting is refused."""
    try:
        _check(libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "make-private /")
        _check(libc.mount(b"tmpfs", workdir.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                          f"size={disk_mb}m,mode=0700".encode()), "mount tmpfs")
    except OSError:
        return False
    finally:
        with open(os.path.join(workdir, "prog.py"), "wb") as f:
            f.write(program)
    return True


def child(spec: dict, alive: int) -> None:
    """PID 1 of the new namespace: drop privileges, limit, confine, exec the program. `alive` is
    the read end of a pipe the launcher holds open: EOF means it already died."""
    import select

    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([alive], [], [], 0)[0]:  # the launcher died before PDEATHSIG was armed
        os._exit(137)
    os.close(alive)
    os.setsid()
    workdir = spec["workdir"]
    if os.geteuid() == 0:  # no user namespace could be made and the caller is root: give up root
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    mem = spec["memory_mb"] << 20
    for res, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, spec["cpu_s"]),
                       (resource.RLIMIT_FSIZE, spec["file_mb"] << 20), (resource.RLIMIT_NOFILE, 64),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, spec["nproc"])):
        resource.setrlimit(res, (value, value))
    if spec["landlock_abi"]:
        apply_landlock(spec["landlock_abi"], spec["read_roots"], workdir)
    os.chdir(workdir)
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
    os.execve(spec["python"], [spec["python"], "-I", "-S", os.path.join(workdir, "prog.py")], env)


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    workdir = spec["workdir"]
    with open(os.path.join(workdir, "prog.py"), "rb") as f:
        program = f.read()
    layers = {"session": True, "pid": False, "net": False, "mount": False, "disk": False,
              "unprivileged": False, "nproc": True, "landlock": bool(spec["landlock_abi"])}
    enter_namespaces(layers)
    layers["disk"] = layers["mount"] and mount_workdir(workdir, spec["disk_mb"], program)
    if not layers["unprivileged"] and os.geteuid() == 0:  # the child will setuid(65534)
        layers["unprivileged"] = True
        for path in (workdir, os.path.join(workdir, "prog.py")):
            os.chown(path, NOBODY, NOBODY)
    _write(spec["layers_out"], json.dumps(layers))
    alive, keep = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(keep)
        try:
            child(spec, alive)
        except BaseException as e:  # noqa: BLE001 - the child must never return into the launcher
            os.write(2, f"sandbox: {e}\n".encode())
        os._exit(126)
    os.close(alive)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
