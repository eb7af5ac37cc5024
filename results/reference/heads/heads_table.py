"""KOALA Table 1 analog from the committed runs of results/reference/heads/heads_eval.sh and the trainings of
results/reference/heads/train_heads.sh: one row per head (EAGLE / Medusa, K = 1..3, plain / adversarial).

Columns: the answer tokens of the training data, training minutes and held-out top-1 (training.json); from the chain4 run (greedy chain
of 3 at BC 4): KOALA's mean acceptance length and 1/2/3-alpha; from the bc10 / bc30 runs (the
head's tree): #MAT, speedup over AR of the same run, pld's speedup in that run, the head's
draft ms per step and the run's ar agreement. Every figure is computed from samples.jsonl with
specbench_cli.report.metrics (nothing typed in).

Runs are found as RESULTS/<tag>/<stage>/<run_id>/ with tag = head names joined by '+'
(results/reference/heads/heads_eval.sh); each head's row reads its method's rows from its tag's runs.

With `--bf16 DIR` (the same heads evaluated with DTYPE=bfloat16 into DIR, stages bc10 / bc30) the
table gains bfloat16 columns: #MAT, speedup and pld's speedup at BC 10 and BC 30.

usage: python results/reference/heads/heads_table.py [RESULTS=results/reference/heads] [TRAINING=results/reference/heads-training] [--bf16 DIR]
writes RESULTS/table.md and prints it
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specbench_cli.atomic import atomic_write
from specbench_cli.report import metrics as m
from specbench_cli.store.runfolder import all_rows, load_runs

HEADS = ("eagle", "medusa")


def stage(folder: Path, head: str) -> dict | None:
    """Overall metrics of method `head`, of pld and the head's draft ms/step in one stage folder."""
    runs = [p for p in folder.glob("*/") if (p / "samples.jsonl").is_file()] if folder.is_dir() else []
    if not runs:
        return None
    rows = all_rows(load_runs(runs))
    s = m.summarize(rows, by=("method",), overall=False).set_index("method")
    if head not in s.index:
        return None
    ok = [r for r in rows if r["method"] == head and r.get("status") == "ok"]
    steps = sum(r["steps"] for r in ok)
    out = {k: float(s.loc[head, k]) for k in ("mat", "speedup", "ar_agreement", "alpha1", "alpha2", "alpha3")}
    out["pld"] = float(s.loc["pld", "speedup"]) if "pld" in s.index else float("nan")
    out["draft_ms"] = 1000 * sum(r.get("draft_time", 0.0) for r in ok) / max(1, steps)
    out["verify_ms"] = 1000 * sum(r.get("verify_time", 0.0) for r in ok) / max(1, steps)
    out["label"] = ok[0]["method_label"] if ok else head
    cfg = json.loads((runs[0] / "manifest.json").read_text()).get("config", {})
    out["forward"] = cfg.get("forward", "sdpa")  # runs made before --forward existed used sdpa
    return out


def f(x: float, digits: int = 2) -> str:
    return "–" if x != x else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="?", default=Path("results/reference/heads"))
    ap.add_argument("training", type=Path, nargs="?", default=Path("results/reference/heads-training"))
    ap.add_argument("--bf16", type=Path, help="bfloat16 runs of the same heads (stages bc10, bc30)")
    args = ap.parse_args()
    res, train = args.results, args.training
    head = ("| run | head | data (answer tok) | train min | held-out top-1 | ℓ (chain 3) | 1-α | 2-α | 3-α "
            "| BC10 #MAT | BC10 speedup | pld BC10 | draft/verify ms BC10 | BC30 #MAT | BC30 speedup | pld BC30 "
            "| draft/verify ms BC30 | =AR | forward |")
    rule = ("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: | ---: | --- |")
    if args.bf16:
        head += " bf16 BC10 #MAT | bf16 BC10 speedup | bf16 pld BC10 | bf16 BC30 #MAT | bf16 BC30 speedup | bf16 pld BC30 |"
        rule += " ---: | ---: | ---: | ---: | ---: | ---: |"
    lines = [head, rule]
    heads = [(d, name) for d in sorted(p for p in res.iterdir() if p.is_dir()) for name in d.name.split("+")
             if name.split("-")[0] in HEADS]
    nan = float("nan")
    for d, name in sorted(heads, key=lambda x: x[1]):
        t_file = train / name / "training.json"
        t = json.loads(t_file.read_text()) if t_file.is_file() else {}
        c, b10, b30 = (stage(d / s, name.split("-")[0]) or {} for s in ("chain4", "bc10", "bc30"))
        agree = [x.get("ar_agreement", nan) for x in (c, b10, b30) if x]
        cells = [
            f"| {name}", t.get("label", b10.get("label", "?")), str(t.get("data_response_tokens", "–")),
            f(t.get("training_seconds", nan) / 60, 1),
            f(t.get("eval_top1_h0", nan), 3), f(c.get("mat", nan)), f(c.get("alpha1", nan)), f(c.get("alpha2", nan)),
            f(c.get("alpha3", nan)), f(b10.get("mat", nan)), f(b10.get("speedup", nan)), f(b10.get("pld", nan)),
            f"{f(b10.get('draft_ms', nan), 0)} / {f(b10.get('verify_ms', nan), 0)}", f(b30.get("mat", nan)),
            f(b30.get("speedup", nan)), f(b30.get("pld", nan)),
            f"{f(b30.get('draft_ms', nan), 0)} / {f(b30.get('verify_ms', nan), 0)}",
            f(min(agree) if agree else nan),
            "/".join(sorted({x["forward"] for x in (c, b10, b30) if x})) or "–"]
        if args.bf16:
            h10, h30 = (stage(args.bf16 / d.name / s, name.split("-")[0]) or {} for s in ("bc10", "bc30"))
            cells += [f(x.get(k, nan)) for x in (h10, h30) for k in ("mat", "speedup", "pld")]
        lines.append(" | ".join(cells) + " |")
    atomic_write(res / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
