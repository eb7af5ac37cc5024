"""`benchmarks/suffix_peers.py` as a module: the program format, random programs, the trace of
a run's answers and the executor that both specbench's suffix trees and the reference run."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "suffix_peers.py"
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "suffix_reference.json.gz"


@lru_cache(maxsize=1)
def peers():
    spec = importlib.util.spec_from_file_location("suffix_peers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
