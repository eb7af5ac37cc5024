"""`specbench sweep --ray-address` on a real Ray cluster on loopback: a head that runs nothing and
two worker nodes with one CPU each (`ray start`, three raylets). One Ray worker is killed with
SIGKILL while its job is writing rows; the sweep must retry it, resume its run folder and end with
the same rows and the same #MAT as the same grid run locally."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers.sweep import comparable_rows, sweep_subprocess, table_numbers, write_grid

from specbench_cli.sweep import jobs

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'specbench-cli[ray]'")
RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli(*args: str, timeout: float = 120) -> None:
    proc = subprocess.run([RAY, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert proc.returncode == 0, f"ray {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


@pytest.fixture
def ray_cluster():
    """HOST:PORT of a head (0 CPUs) plus two 1-CPU worker nodes; `ray stop --force` afterwards."""
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # unix socket paths must stay short
    port = free_port()
    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    try:
        ray_cli("start", "--head", "--port", str(port), "--num-cpus", "0", "--include-dashboard", "false",
                "--temp-dir", temp, *common)
        for _ in range(2):
            ray_cli("start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", *common)
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def kill_a_worker_mid_job(sweep_dir: Path, deadline: float) -> str:
    """SIGKILL the Ray worker of the first job that has rows but is not finished; its job id."""
    while time.time() < deadline:
        for job_dir in sorted((sweep_dir / "jobs").glob("*")):
            state, run = jobs.job_state(job_dir)
            starts = [a for a in jobs.attempts(job_dir) if a["event"] == "start"]
            if state == "partial" and starts and len(jobs.rows(run)) >= 2:
                os.kill(starts[-1]["pid"], signal.SIGKILL)
                return job_dir.name
        time.sleep(0.05)
    raise AssertionError("no job reached its second row before the deadline")


def test_ray_sweep_survives_a_killed_worker_and_matches_local(tmp_path, tiny_model_dir, ray_cluster):
    grid = write_grid(tmp_path, f'models = ["{tiny_model_dir}"]\nmethods = ["pld", "jacobi", "lookahead"]\n'
                                f'bcs = [4, 8]\nshard = "none"\nmax_new_tokens = 32\n', "ray.toml")
    on_ray = tmp_path / "on-ray"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweep = subprocess.Popen([sys.executable, "-m", "specbench_cli", "sweep", str(grid), "-o", str(on_ray),
                              "--ray-address", ray_cluster, "--cpus-per-job", "1", "--retries", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        killed = kill_a_worker_mid_job(on_ray, time.time() + 600)  # generous: a loaded 2-core machine
        out, err = sweep.communicate(timeout=900)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 0, err[-3000:]
    assert "retry" in err and "all 2 jobs finished" in err
    starts = [a for a in jobs.attempts(on_ray / "jobs" / killed) if a["event"] == "start"]
    assert len(starts) >= 2 and starts[-1]["resume"], starts
    assert len({a["host"] for a in starts}) == 1  # one machine; nodes differ by raylet, not host

    local = tmp_path / "local"
    here = sweep_subprocess(["sweep", str(grid), "-o", str(local)])
    assert here.returncode == 0, here.stderr[-3000:]
    assert comparable_rows(on_ray) == comparable_rows(local)  # no row lost or duplicated by the kill
    assert table_numbers(on_ray) == table_numbers(local)
    merged = json.loads((on_ray / "report" / "table.json").read_text())
    assert {r["method_label"] for r in merged["summary"]} >= {"ar"}
