"""Summarise results/reference/heads-training/*/training.json into that folder's table.md.

usage: python results/reference/heads/heads_summary.py [results folder]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specbench_cli.atomic import atomic_write  # replaces a link at the name, never writes through it


def row(name: str, t: dict) -> str:
    heads = sorted({k.split("_h")[1] for k in t if k.startswith("eval_top1_h")}, key=int)
    top1 = " / ".join(f"{t[f'eval_top1_h{h}']:.3f}" for h in heads)
    top5 = " / ".join(f"{t[f'eval_top5_h{h}']:.3f}" for h in heads)
    return (f"| {name} | {t['label']} | {t['params'] / 1e6:.2f}M | {t['steps_done']} | {t['tokens_seen']} | "
            f"{t['training_seconds'] / 60:.1f} | {top1} | {top5} |")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "heads-training")
    runs = sorted(p for p in root.iterdir() if (p / "training.json").is_file())
    if not runs:
        sys.exit(f"no training.json under {root}")
    metas = [json.loads((p / "training.json").read_text()) for p in runs]
    datas = {m["data"]: m for m in metas}  # one line per data set the runs trained on
    lines = [f"Data: {d} -> {m['data_sequences']} sequences, {m['data_tokens']} tokens "
             f"({m['data_response_tokens']} answer tokens); target {m['target']} ({m['dtype']})." for d, m in datas.items()]
    lines += ["",
             "| run | head | params | steps | tokens seen | train min | held-out top-1 per head | top-5 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [row(p.name, m) for p, m in zip(runs, metas)]
    atomic_write(root / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
