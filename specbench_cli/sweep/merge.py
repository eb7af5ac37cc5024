"""The sweep's merged report and status file.

The report is `specbench report RUN_DIR... -o SWEEP/report` over every finished job's run folder
(all table formats and figures that command writes). Speedups stay paired inside each run: the
report pairs a method's rows with the AR rows of the same run folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from specbench_cli.atomic import atomic_write

STATUS = "sweep.json"


def merge(sweep_dir: Path, run_dirs: list[str]) -> int:
    """Run `specbench report` over the run folders (its table goes to our stdout); its exit code."""
    cmd = [sys.executable, "-m", "specbench_cli", "report", *run_dirs, "--output", str(sweep_dir / "report")]
    return subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode


def write_status(sweep_dir: Path, grid_path: Path, jobs: list, results: dict[str, dict]) -> Path:
    """SWEEP/sweep.json: the grid it ran and, per job, its settings, state and run folder."""
    doc = {
        "grid": str(grid_path),
        "grid_text": grid_path.read_text(encoding="utf-8"),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "jobs": [{"id": job.id, "settings": job.settings, **_state(results.get(job.id, {}), sweep_dir)}
                 for job in jobs],
    }
    return atomic_write(sweep_dir / STATUS, json.dumps(doc, indent=2) + "\n")


def _state(result: dict, sweep_dir: Path) -> dict:
    """A job's result for sweep.json, its run folder relative to the sweep folder (movable)."""
    state = {k: result.get(k) for k in ("status", "run", "attempt", "seconds", "errors", "error")}
    if state["run"] and Path(state["run"]).is_relative_to(sweep_dir):
        state["run"] = str(Path(state["run"]).relative_to(sweep_dir))
    return state
