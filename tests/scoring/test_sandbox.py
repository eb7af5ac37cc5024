"""Attacks model-written code could make, each against the sandbox that `report --execute-code`
runs it in. Every attack is bounded (seconds) and local. A layer this kernel cannot provide is
skipped with its name (and `Result.missing` names it for reports), never silently passed."""

from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
import textwrap
import threading
import time
import uuid

import pytest

from specbench_cli.scoring.sandbox import LAYERS, missing_layers, run_untrusted

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


@pytest.fixture(scope="module")
def missing():
    return missing_layers()


def need(missing, *layers):
    gone = [layer for layer in layers if layer in missing]
    if gone:
        pytest.skip(f"this kernel does not provide the sandbox layer(s): {', '.join(gone)}")


def run(code: str, **kwargs):
    return run_untrusted(textwrap.dedent(code), **kwargs)


def test_every_layer_is_named_and_a_plain_program_passes(missing):
    res = run("print('ok')\n")
    assert res.passed and res.output.strip() == "ok"
    assert set(res.missing) <= set(LAYERS) and res.missing == missing


# --- network: none at all, UDP and loopback included ------------------------------------------

def test_udp_datagram_to_a_local_listener_never_arrives(missing):
    need(missing, "net")
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    res = run(f"""
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.sendto(b"leak", ("127.0.0.1", {port}))
            print("sent")
        except OSError as e:
            print("refused", e.errno)
    """)
    with pytest.raises(socket.timeout):
        listener.recvfrom(16)
    listener.close()
    assert "refused" in res.output or "sent" in res.output


def test_tcp_connect_to_a_local_server_fails(missing):
    need(missing, "net")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    res = run(f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=2)
    """)
    server.close()
    assert res.status == "failed"


@pytest.mark.parametrize("family, address", [("AF_INET", "('8.8.8.8', 53)"), ("AF_INET6", "('::1', 53)")])
def test_udp_out_of_the_machine_and_over_ipv6_fails(missing, family, address):
    need(missing, "net")
    res = run(f"""
        import socket
        s = socket.socket(socket.{family}, socket.SOCK_DGRAM)
        s.sendto(b"x", {address})
    """)
    assert res.status == "failed"


def test_no_network_interface_is_up(missing):
    need(missing, "net")
    res = run("""
        import socket
        names = [n for _, n in socket.if_nameindex()]
        print(names)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.sendto(b"x", s.getsockname())
    """)
    assert res.status == "failed" and "Network is unreachable" in res.output


def test_a_raw_socket_is_refused(missing):
    need(missing, "unprivileged")
    res = run("""
        import socket
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    """)
    assert res.status == "failed" and "PermissionError" in res.output


# --- UNIX sockets and the filesystem view: nothing of the host's temporary folder ---------------

@pytest.fixture
def host_socket():
    """A listener on a UNIX socket file in the host's temporary folder that anyone may connect
    to (mode 0777, so only the sandbox can stop a connection); yields (path, connections seen)."""
    path = os.path.join(tempfile.gettempdir(), f"specbench-probe-{uuid.uuid4().hex[:12]}.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(8)
    server.settimeout(0.2)
    seen: list = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (socket.timeout, OSError):
                continue
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            seen.append((struct.unpack("3i", creds), conn.recv(64)))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path, seen
    stop.set()
    thread.join(2)
    server.close()
    os.unlink(path)


@pytest.mark.parametrize("landlock", [True, False], ids=["with-landlock", "view-alone"])
def test_a_unix_socket_in_the_host_temp_folder_receives_nothing(missing, host_socket, landlock):
    """The escape: a program connecting to a socket file outside its sandbox. Its private view
    has no host temporary folder, so the path does not exist there (with or without Landlock)."""
    need(missing, "view")
    path, seen = host_socket
    res = run(f"""
        import socket
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            s = socket.socket(socket.AF_UNIX, kind)
            try:
                s.connect({path!r})
                s.sendall(b"escaped")
                print("connected")
            except OSError as e:
                print("refused", type(e).__name__)
    """, landlock=landlock)
    time.sleep(0.3)
    assert seen == [] and "connected" not in res.output and res.output.count("refused FileNotFoundError") == 2


def test_the_host_temp_folder_is_not_in_the_view_and_takes_no_socket_file(missing, tmp_path):
    need(missing, "view")
    marker = os.path.join(tempfile.gettempdir(), f"specbench-marker-{uuid.uuid4().hex[:12]}")
    planted = os.path.join(tempfile.gettempdir(), f"specbench-planted-{uuid.uuid4().hex[:12]}.sock")
    open(marker, "w").close()
    try:
        res = run(f"""
            import os, socket
            print("sees marker", os.path.exists({marker!r}))
            print("sees pytest", os.path.exists({str(tmp_path)!r}))
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.bind({planted!r})
                print("planted")
            except OSError as e:
                print("bind refused", e.errno)
        """, landlock=False)
        assert "sees marker False" in res.output and "sees pytest False" in res.output
        assert "planted" not in res.output.replace("bind refused", "") and not os.path.exists(planted)
    finally:
        os.unlink(marker)


def test_the_program_is_never_root_outside(missing):
    """Seen from outside (the host's /proc), every id of the program is unprivileged: 65534
    (nobody) when the caller is root, the caller's own uid otherwise; no supplementary group."""
    need(missing, "unprivileged")
    marker = f"whoami-{uuid.uuid4().hex}"
    done = threading.Event()
    result: list = []

    def sandboxed() -> None:
        result.append(run(f"""
            import os, sys
            {_sleeper(marker)}
        """, timeout=8))
        done.set()

    threading.Thread(target=sandboxed, daemon=True).start()
    status = None
    deadline = time.monotonic() + 6
    while status is None and time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() not in f.read():
                        continue
                with open(f"/proc/{pid}/status") as f:
                    status = dict(line.split(":", 1) for line in f if ":" in line)
                break
            except OSError:
                continue
        time.sleep(0.05)
    done.wait(15)
    assert status is not None, "the sandboxed program was not found"
    want_uid = 65534 if os.geteuid() == 0 else os.getuid()
    want_gid = 65534 if os.geteuid() == 0 else os.getgid()
    assert [int(x) for x in status["Uid"].split()] == [want_uid] * 4
    assert [int(x) for x in status["Gid"].split()] == [want_gid] * 4
    assert 0 not in [int(x) for x in status["Groups"].split()]
    assert int(status["CapEff"], 16) == 0


# --- processes: none outlives the program, a cap on how many ------------------------------------

def _alive(marker: str) -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        return True
            except OSError:
                pass
    return False


def _sleeper(marker: str) -> str:
    return (f"os.execv(sys.executable, [sys.executable, '-I', '-S', '-c', "
            f"'import time; time.sleep(60)  # {marker}'])")


def test_a_double_forked_setsid_child_does_not_outlive_the_program(missing):
    need(missing, "pid")
    marker = f"escapee-{uuid.uuid4().hex}"
    res = run(f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                {_sleeper(marker)}
            os._exit(0)
        time.sleep(0.5)
        print("parent done")
    """)
    assert res.passed
    time.sleep(0.3)
    assert not _alive(marker)


def test_a_background_child_is_killed_at_the_timeout(missing):
    need(missing, "pid")
    marker = f"timeout-{uuid.uuid4().hex}"
    res = run(f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            {_sleeper(marker)}
        while True:
            pass
    """, timeout=2)
    assert res.status == "timeout"
    time.sleep(0.3)
    assert not _alive(marker)


def test_a_fork_bomb_hits_the_process_cap(missing):
    need(missing, "nproc")
    res = run("""
        import os, time
        made = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            made += 1
        print("forks", made)
    """, timeout=8)
    made = int(res.output.split("forks")[-1].split()[0])
    assert made < 200 and made <= 32


def test_processes_outside_are_invisible_and_cannot_be_signalled(missing):
    need(missing, "pid")
    res = run(f"""
        import os
        try:
            os.kill({os.getpid()}, 0)
            print("signalled")
        except ProcessLookupError:
            print("invisible")
        except PermissionError:
            print("refused")
    """)
    assert "signalled" not in res.output


# --- disk: a total cap and nothing outside ----------------------------------------------------

def test_writing_many_files_hits_the_total_disk_cap(missing):
    need(missing, "disk")
    res = run("""
        written = 0
        try:
            for i in range(8):
                with open(f"f{i}", "wb") as f:
                    for _ in range(10):
                        f.write(b"x" * (1 << 20))
                        written += 1
        except OSError as e:
            print("stopped", e.errno)
        print("MB", written)
    """, disk_mb=64)
    mb = int(res.output.split("MB")[-1].split()[0])
    assert mb < 75 and "stopped" in res.output


def test_one_large_file_hits_the_file_size_cap():
    res = run("open('big', 'wb').write(b'x' * (40 << 20))\n")
    assert res.status == "failed"


def test_writing_outside_the_working_folder_fails(missing, tmp_path):
    need(missing, "landlock")
    os.chmod(tmp_path, 0o777)
    target = tmp_path / "planted.txt"
    res = run(f"open({str(target)!r}, 'w').write('x')\n")
    assert res.status == "failed" and not target.exists()


def test_reading_files_outside_the_python_installation_fails(missing, tmp_path):
    need(missing, "landlock")
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    secret.chmod(0o644)
    res = run(f"print(open({str(secret)!r}).read())\n")
    assert res.status == "failed" and "token" not in res.output


# --- privileges -------------------------------------------------------------------------------

def test_the_program_is_not_root_and_has_no_capabilities(missing):
    need(missing, "unprivileged")
    res = run("""
        import os
        print("uid", os.getuid())
        open("f", "w").close()
        for attempt in (lambda: os.setuid(0), lambda: os.chown("f", 0, 0), lambda: os.chroot(".")):
            try:
                attempt()
                print("privileged")
            except (PermissionError, OSError):
                pass
    """)
    assert res.passed and "uid 0" not in res.output and "privileged" not in res.output


def test_mounting_is_refused(missing):
    need(missing, "unprivileged")
    res = run("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.mount(b"tmpfs", b".", b"tmpfs", 0, None)
        print("rc", rc)
    """)
    assert "rc 0" not in res.output


# --- resources and environment ----------------------------------------------------------------

def test_memory_is_capped():
    res = run("x = bytearray(8 << 30)\nprint('allocated')\n", memory_mb=512)
    assert res.status == "failed" and "allocated" not in res.output


def test_a_cpu_loop_times_out():
    start = time.monotonic()
    res = run("while True:\n    pass\n", timeout=1.5)
    assert res.status == "timeout" and time.monotonic() - start < 10


def test_open_files_are_capped():
    res = run("""
        fs = []
        for i in range(1000):
            fs.append(open(__file__))
    """)
    assert res.status == "failed" and "Too many open files" in res.output


def test_no_environment_and_no_project_imports():
    res = run("import os\nprint(sorted(os.environ))\nimport specbench_cli\n")
    assert res.status == "failed" and "PYTHONPATH" not in res.output and "ModuleNotFoundError" in res.output
