"""Per pass, each instance's Spec-Bench speedup over AR, and the paired difference between an
adaptive instance and a fixed one of the same method (same pass, same questions): its mean over
passes and the standard error of that mean. Reads a run folder's samples.jsonl only.

    python paired_passes.py RUN_DIR [METHOD@adaptive:METHOD@N ...]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from specbench_cli.report import metrics
from specbench_cli.store.runfolder import RunFolder

run = Path(sys.argv[1])
rows = RunFolder.open(run).rows()
paired = metrics.paired_throughputs(metrics.question_throughputs(rows))
per_pass: dict[str, list[float]] = {}
for label, g in paired.groupby("method_label", sort=False):
    if metrics.is_ar_label(label):
        continue
    per_pass[label] = metrics.replicate_speedups(g)
for label, values in per_pass.items():
    print(f"{label:18s} " + "  ".join(f"{v:.3f}" for v in values))
pairs = [a.split(":") for a in sys.argv[2:]] or [
    [m, f] for m in per_pass if m.endswith("@adaptive")
    for f in per_pass if f.split("@")[0] == m.split("@")[0] and f != m]
for adaptive, fixed in pairs:
    d = [a - b for a, b in zip(per_pass[adaptive], per_pass[fixed])]
    mean, std = metrics.mean_std(d)
    se = std / math.sqrt(len(d))
    base = metrics.mean_std(per_pass[fixed])[0]
    print(f"{adaptive} - {fixed}: {mean:+.3f} ({100 * mean / base:+.1f} %), standard error {se:.3f}, "
          f"per pass " + " ".join(f"{x:+.3f}" for x in d))
