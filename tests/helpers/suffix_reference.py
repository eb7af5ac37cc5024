"""`benchmarks/suffix_peers.py` as a module: the program format, random programs, the trace of
a run's answers and the executor that both specbench's suffix trees and the reference run."""

from __future__ import annotations

from pathlib import Path

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "suffix_peers.py"
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "suffix_reference.json.gz"


def peers():
    return load_script(SCRIPT, "suffix_peers")
