"""The sandbox's launcher: run as `python -I -S jail.py SPEC.json` (standard library only, so it
needs no site-packages) by `sandbox.run_untrusted`, never imported by the tool itself.

It puts the untrusted program in fresh namespaces and drops every privilege before `exec`:

1. A stage process `unshare`s a user namespace; the launcher, still outside, writes its uid/gid
   map: uid/gid 65534 inside is 65534 (nobody) outside when the caller is root, the caller's own
   uid/gid otherwise. The stage then becomes 65534, so nothing the program does is ever seen as
   root outside (a file it opens, a connection it makes, a process it owns), and after `exec` it
   holds no capability. Without user namespaces a root caller's program switches to 65534 itself.
2. The stage `unshare`s PID, network, mount, IPC and UTS namespaces. The program is PID 1 of its
   PID namespace: when it ends, or when the stage or launcher dies (PR_SET_PDEATHSIG), the kernel
   kills every process left in it, whatever session or group those moved to. The network
   namespace has only a loopback device that is down: no TCP, no UDP, not even to 127.0.0.1;
   abstract UNIX sockets belong to it too.
3. A private filesystem view (`pivot_root` into a fresh tmpfs): only the runtime the interpreter
   needs (`spec["read_roots"]`, bound read-only), /dev/null, /dev/zero, /dev/random, /dev/urandom,
   and the working folder, a tmpfs of `disk_mb` (the total the program can write). The host's
   temporary folder, home folders, /run and every socket file on the machine are not in it.
4. rlimits (address space, CPU, file size, open files, processes, no core dumps), then
   Landlock (read only the runtime, write only the working folder, no TCP, no abstract UNIX
   sockets, signals scoped to itself) when the kernel has it.

Layers the kernel refuses are skipped, not fatal; which ones applied is written to
`spec["layers_out"]` (JSON) before the program starts, for the caller to report.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
ST_RELATIME = 4096
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
NOBODY = 65534
SYS_PIVOT_ROOT = {"x86_64": 155, "amd64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "ppc64le": 203,
                  "ppc64": 203, "s390x": 217, "i686": 217, "i386": 217, "armv7l": 218}
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")

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

    # no TCP bind/connect; scoped: abstract UNIX sockets and signals of this domain only
    attr = RulesetAttr(fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    for path, allowed in [(p, read) for p in read_roots] + [(workdir, fs)]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:  # a runtime path the private view left out: nothing to allow
            continue
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


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def write_id_maps(pid: int, outside_uid: int, outside_gid: int) -> bool:
    """From the launcher (outside): map uid/gid 65534 of `pid`'s new user namespace to
    `outside_uid`/`outside_gid`. False when the kernel refuses."""
    try:
        _write(f"/proc/{pid}/setgroups", "deny")
        _write(f"/proc/{pid}/uid_map", f"{NOBODY} {outside_uid} 1")
        _write(f"/proc/{pid}/gid_map", f"{NOBODY} {outside_gid} 1")
        return True
    except OSError:
        return False


def _bind_readonly(fd: int, target: str) -> None:
    """Bind the path open as O_PATH `fd` on `target`, then make that bind read-only, keeping the
    flags the kernel locks for a less privileged namespace (nosuid, nodev, noexec, atime)."""
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    st = os.statvfs(target)
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | (st.f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME
                                                             | MS_NODIRATIME))
    if not st.f_flag & (ST_RELATIME | MS_NOATIME):
        flags |= MS_STRICTATIME
    elif st.f_flag & ST_RELATIME:
        flags |= MS_RELATIME
    try:
        _mount(None, target, None, flags)
    except OSError:  # still not writable by the program's unprivileged uid, nor (with Landlock) at all
        pass


def _make_point(path: str, directory: bool) -> None:
    if directory:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.lexists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def open_view_sources(spec: dict) -> list[tuple[str, int, bool]]:
    """(path, O_PATH fd, is a folder) of every runtime path and device the view shows, opened
    while the stage can still reach them with the caller's rights (a home folder the program's
    unprivileged uid could not even pass through)."""
    out = []
    for path in spec["read_roots"] + [d for d in DEVICES if d not in spec["read_roots"]]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        out.append((path, fd, os.path.isdir(f"/proc/self/fd/{fd}")))
    return out


def build_view(spec: dict, sources: list[tuple[str, int, bool]], program: bytes, as_root: bool) -> None:
    """Make the private root at spec["view"] and `pivot_root` into it (in the stage's own mount
    namespace). Runtime paths are bound read-only; symbolic links among them (/lib -> usr/lib)
    are links again; the working folder is a fresh tmpfs of `disk_mb` holding the program."""
    root, workdir = spec["view"], spec["workdir"]
    nr = SYS_PIVOT_ROOT.get(platform.machine())
    if nr is None:
        raise OSError(0, f"no pivot_root number known for {platform.machine()}")
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    old = os.umask(0o022)
    try:
        top = sorted(p for p, _, _ in sources)
        for path, fd, is_dir in sources:
            if any(path != t and path.startswith(t.rstrip("/") + "/") for t in top):
                continue  # shown by the bind of a folder above it
            target = root + path
            if os.path.islink(path) and path not in DEVICES:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.symlink(os.readlink(path), target)
                continue
            _make_point(target, is_dir)
            if path in DEVICES:
                _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
            else:
                _bind_readonly(fd, target)
        os.makedirs(root + workdir, exist_ok=True)
        _mount("tmpfs", root + workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['disk_mb']}m,mode=0700")
        with open(os.path.join(root + workdir, "prog.py"), "wb") as f:
            f.write(program)
        if as_root:  # no user namespace: the program will be 65534 and must own its folder
            for p in (root + workdir, os.path.join(root + workdir, "prog.py")):
                os.chown(p, NOBODY, NOBODY)
    finally:
        os.umask(old)
    os.chdir(root)
    if libc.syscall(ctypes.c_long(nr), b".", b".") != 0:
        raise OSError(ctypes.get_errno(), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    try:  # the skeleton read-only too (it is the program's own view either way)
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        pass


def mount_workdir(workdir: str, disk_mb: int, program: bytes, as_root: bool) -> bool:
    """Without a view: a private tmpfs of disk_mb over workdir holding the program; False if
    mounting is refused (the program then stays in the folder the caller wrote)."""
    try:
        _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_mb}m,mode=0700")
    except OSError:
        return False
    with open(os.path.join(workdir, "prog.py"), "wb") as f:
        f.write(program)
    if as_root:
        for p in (workdir, os.path.join(workdir, "prog.py")):
            os.chown(p, NOBODY, NOBODY)
    return True


def child(spec: dict, alive: int) -> None:
    """PID 1 of the new namespace: drop privileges, limit, confine, exec the program. `alive` is
    the read end of a pipe the stage holds open: EOF means it already died."""
    import select

    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([alive], [], [], 0)[0]:  # the stage died before PDEATHSIG was armed
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


def _read_byte(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 1)
        except InterruptedError:
            continue


def _wait(pid: int) -> int:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def stage(spec: dict, program: bytes, to_launcher: int, from_launcher: int, report: int) -> int:
    """The process that enters the namespaces, builds the view and forks the program (as PID 1
    of the new PID namespace); returns the program's exit status."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    root_caller = os.geteuid() == 0
    if root_caller:
        os.setgroups([])  # supplementary groups would survive into the user namespace
    layers = {"pid": False, "net": False, "mount": False, "view": False, "disk": False, "unprivileged": False}
    userns = _unshare(CLONE_NEWUSER)
    os.write(to_launcher, b"u" if userns else b"-")
    mapped = _read_byte(from_launcher) == b"1"
    if userns and not mapped:
        raise OSError(0, "the user namespace could not be mapped")
    rest = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
    if _unshare(rest):
        layers.update(pid=True, net=True, mount=True)
    else:  # some kernels allow only part of it: take each namespace that is allowed
        for name, flag in (("pid", CLONE_NEWPID), ("net", CLONE_NEWNET), ("mount", CLONE_NEWNS)):
            layers[name] = _unshare(flag)
        _unshare(CLONE_NEWIPC | CLONE_NEWUTS)
    sources = []
    if layers["mount"]:
        try:
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            sources = open_view_sources(spec)
        except OSError:
            layers["mount"] = False
    if userns:  # from here on the caller outside sees 65534 (root caller) or itself, never root
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        layers["unprivileged"] = True
    elif root_caller:
        layers["unprivileged"] = True  # the program drops to 65534 itself (`child`)
    as_root = root_caller and not userns
    if layers["mount"]:
        try:
            build_view(spec, sources, program, as_root)
            layers["view"] = layers["disk"] = True
        except OSError as e:
            layers["view_error"] = str(e)
            layers["disk"] = mount_workdir(spec["workdir"], spec["disk_mb"], program, as_root)
    for _, fd, _ in sources:
        os.close(fd)
    os.write(report, json.dumps(layers).encode())
    os.close(report)
    alive, keep = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(keep)
        try:
            child(spec, alive)
        except BaseException as e:  # noqa: BLE001 - the child must never return into the stage
            os.write(2, f"sandbox: {e}\n".encode())
        os._exit(126)
    os.close(alive)
    return _wait(pid)


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    workdir = spec["workdir"]
    with open(os.path.join(workdir, "prog.py"), "rb") as f:
        program = f.read()
    up_r, up_w = os.pipe()        # stage -> launcher: "u" (a user namespace was made) or "-"
    down_r, down_w = os.pipe()    # launcher -> stage: "1" (mapped) or "0"
    rep_r, rep_w = os.pipe()      # stage -> launcher: the layers it applied (JSON)
    pid = os.fork()
    if pid == 0:
        for fd in (up_r, down_w, rep_r):
            os.close(fd)
        try:
            code = stage(spec, program, up_w, down_r, rep_w)
        except BaseException as e:  # noqa: BLE001 - the stage must never return into the launcher
            os.write(2, f"sandbox: {e}\n".encode())
            code = 126
        os._exit(code)
    for fd in (up_w, down_r, rep_w):
        os.close(fd)
    made = _read_byte(up_r)
    mapped = True
    if made == b"u":
        root = os.geteuid() == 0
        mapped = write_id_maps(pid, NOBODY if root else os.getuid(), NOBODY if root else os.getgid())
    try:
        os.write(down_w, b"1" if mapped else b"0")
    except BrokenPipeError:
        pass
    chunks = []
    while chunk := os.read(rep_r, 4096):
        chunks.append(chunk)
    try:
        got = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        got = {}
    layers = {"session": True, "nproc": True, "landlock": bool(spec["landlock_abi"]), "pid": False, "net": False,
              "mount": False, "view": False, "disk": False, "unprivileged": False, **got}
    _write(spec["layers_out"], json.dumps(layers))
    return _wait(pid)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
