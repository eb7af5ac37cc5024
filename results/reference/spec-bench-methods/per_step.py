"""Per-category #MAT and per-step cost of every method instance in a run folder, from its
samples.jsonl alone: the tables under the speedup table in this study's README.

    python results/reference/spec-bench-methods/per_step.py RUN_FOLDER

#MAT = tokens added by decoding steps / steps (pooled over the category's questions);
draft ms and verify ms are means over all steps of `step_draft_ms` / `step_verify_ms`; verify ms
by forward size pools every method's steps by the number of tokens in the forward.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

CATS = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
SHORT = {"mt_bench": "MT-bench", "translation": "Transl.", "summarization": "Summ.", "qa": "QA",
         "math_reasoning": "Math", "rag": "RAG"}


def rows(folder: Path) -> list[dict]:
    out = []
    with open(folder / "samples.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") == "ok" and r.get("steps"):
                out.append(r)
    return out


def label(r: dict) -> str:
    return f"{r['method']}@{r['block_complexity']}"


def main(folder: Path) -> None:
    data = rows(folder)
    added: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    draft: dict = defaultdict(list)
    verify: dict = defaultdict(list)
    by_size: dict = defaultdict(list)
    for r in data:
        acc = r["accept_lengths"]
        for key in (r["category"], "all"):
            added[label(r)][key][0] += sum(acc)
            added[label(r)][key][1] += len(acc)
        draft[label(r)] += r["step_draft_ms"]
        verify[label(r)] += r["step_verify_ms"]
        for used, ms in zip(r["budget_used"], r["step_verify_ms"]):
            by_size[used].append(ms)
    print("| Method | " + " | ".join(SHORT[c] for c in CATS) + " | all | draft ms/step | verify ms/step |")
    print("| :--- | " + " | ".join("---:" for _ in CATS) + " | ---: | ---: | ---: |")
    for name in sorted(added, key=lambda n: (n.split("@")[0] != "ar", n)):
        cells = [f"{a / s:.2f}" if s else "–" for a, s in (added[name][c] for c in CATS + ["all"])]
        print(f"| {name} | " + " | ".join(cells)
              + f" | {statistics.fmean(draft[name]):.2f} | {statistics.fmean(verify[name]):.1f} |")
    print()
    print("Verify ms by tokens in the forward (median, every method's steps pooled): "
          + ", ".join(f"{q} → {statistics.median(v):.1f}" for q, v in sorted(by_size.items()) if len(v) >= 20))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
