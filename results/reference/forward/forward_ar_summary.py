"""Summarise AR runs made with different `--forward` values (results/reference/forward/forward_ar_runs.sh).

    python results/reference/forward/forward_ar_summary.py RUN_DIR [RUN_DIR ...] [--floor-ms 17.5]

Per run: forward and threads (from the manifest), generated tokens, wall seconds, tok/s,
prefill seconds, decode ms per step (verify time / steps), and decode-only tok/s against the
weights' bandwidth floor (538 MB per token at ~30 GB/s is ~17.5 ms, ~57 tok/s).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def summarise(run: Path, floor_ms: float) -> dict:
    manifest = json.loads((run / "manifest.json").read_text())
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["method"] == "ar" and r["status"] == "ok"]
    tokens = sum(r["new_tokens"] for r in rows)
    wall = sum(r["wall_time"] for r in rows)
    steps = sum(r["steps"] for r in rows)
    verify = sum(r["verify_time"] for r in rows)
    prefill = sum(r["prefill_time"] for r in rows)
    decode_ms = 1000 * verify / steps
    cfg = manifest["config"]
    return {"run": run.name, "forward": cfg.get("forward", "sdpa"), "threads": cfg["threads"], "dtype": cfg["dtype"],
            "turns": len(rows), "tokens": tokens, "wall_s": round(wall, 1), "tok_per_s": round(tokens / wall, 2),
            "prefill_s": round(prefill, 1), "decode_ms_per_step": round(decode_ms, 1),
            "decode_tok_per_s": round(1000 / decode_ms, 1), "floor_tok_per_s": round(1000 / floor_ms, 1),
            "x_of_floor": round(decode_ms / floor_ms, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--floor-ms", type=float, default=17.5)
    args = ap.parse_args()
    for run in args.runs:
        print(json.dumps(summarise(run, args.floor_ms)))


if __name__ == "__main__":
    main()
