"""Sweep grids on disk and sweeps in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from specbench_cli.sweep import jobs


def write_grid(tmp_path: Path, text: str, name: str = "grid.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def sweep_subprocess(args, timeout=600):
    """`python -m specbench_cli sweep ARGS` in a subprocess (jobs are subprocesses anyway)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "specbench_cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def comparable_rows(sweep_dir: Path) -> list[tuple]:
    """Every row of every job, without timings: what must not depend on where a job ran."""
    out = []
    for samples in sorted(sweep_dir.glob("jobs/*/*/samples.jsonl")):
        for row in jobs.rows(samples.parent):
            out.append((samples.parts[-3], row["method"], row["question_id"], row["turn"], row["repeat"],
                        row["block_complexity"], tuple(row["output_ids"]), tuple(row["accept_lengths"]), row["steps"]))
    return sorted(out)


def table_numbers(sweep_dir: Path) -> list[tuple]:
    """(method, BC, category, #MAT, n) from the merged table.json: the timing-free part."""
    doc = json.loads((sweep_dir / "report" / "table.json").read_text())
    return sorted((r["method_label"], r["block_complexity"], r["category"], round(r["mat"], 9), r["n_paired"])
                  for r in doc["summary"])
