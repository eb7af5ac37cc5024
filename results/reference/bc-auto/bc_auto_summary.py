"""Markdown summary of a `--block-complexity auto` run (results/reference/bc-auto/bc_auto.sh): the cost curve it
used, each auto instance's calibration (predicted tok/s per candidate budget, the chosen one in
bold), and per instance the measured #MAT and drafting/verifying ms per step on the reported
questions.

    python results/reference/bc-auto/bc_auto_summary.py results/reference/bc-auto/float32/<run_id> > summary.md
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(run: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    cfg, curve = manifest["config"], manifest.get("cost_curve")
    print(f"## {run.name}: {cfg['dtype']}, {cfg['threads']} thread(s), max {cfg['max_new_tokens']} new tokens\n")
    if curve:
        ms = curve["ms"]
        picks = [q for q in (1, 2, 4, 8, 10, 16, 24, 32) if q <= len(ms)]
        print(f"Cost curve ({curve['source']}, measured {curve['measured_at']}): "
              + ", ".join(f"t({q}) = {ms[q - 1]:.1f} ms" for q in picks) + "\n")
    auto = manifest.get("bc_auto") or {}
    if auto:
        budgets = sorted({int(b) for rec in auto.values() for b in rec["candidates"]})
        print("Calibration: predicted tok/s per candidate budget (chosen in bold)\n")
        print("| instance | " + " | ".join(f"BC {b}" for b in budgets) + " |")
        print("| --- | " + " | ".join("---:" for _ in budgets) + " |")
        for spec, rec in auto.items():
            cells = []
            for b in budgets:
                c = rec["candidates"].get(str(b))
                text = "–" if c is None else f"{c['predicted_tokens_per_s']:.2f}"
                cells.append(f"**{text}**" if b == rec["chosen"] else text)
            print(f"| {spec} | " + " | ".join(cells) + " |")
        print()
    print("Reported questions, per decoding step\n")
    print("| instance | BC | #MAT | mean q | draft ms | verify ms | overhead ms | =AR |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in manifest["config"]["methods"]:
        mine = [r for r in rows if r["method"] == name and r["status"] == "ok"]
        if not mine:
            continue
        acc = [a for r in mine for a in r["accept_lengths"]]
        q = [b for r in mine for b in r["budget_used"]]
        d = [x for r in mine for x in r["step_draft_ms"]]
        v = [x for r in mine for x in r["step_verify_ms"]]
        steps = max(len(acc), 1)
        over = 1000 * sum(r["overhead_time"] for r in mine) / steps
        agree = [r["ar_match"] for r in mine if r.get("ar_match") is not None]
        print(f"| {name} | {mine[0]['block_complexity']} | {sum(acc) / steps:.2f} | {statistics.fmean(q):.1f} | "
              f"{statistics.fmean(d):.2f} | {statistics.fmean(v):.1f} | {over:.2f} | "
              f"{f'{sum(agree)}/{len(agree)}' if agree else '–'} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
