"""The drafters-2026 tables, rebuilt from the study's files alone: the run folders' report/table.json
(runs/<dtype>/<base|space>/<run>/, runs/quality/<base|space>/<run>/) and the training records
(training/<name>/training.json, wall.json).

    python results/reference/drafters-2026/table.py results/reference/drafters-2026 [--checkpoints CK] [--scrub]

--scrub first rewrites the run folders' and training records' text files so they name no path of
this machine: the
checkpoint folder becomes CHECKPOINTS, the repository root is dropped and the home folder is ~.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from specbench_cli.atomic import atomic_write  # replaces a link at the name, never writes through it

# Acceptance lengths the papers report at their closest setting (greedy), with the setting; the
# comparison divides our #MAT (tokens per target forward, bonus included) by these.
PAPER_AL = {
    "eagle3": (5.71, "Spec-Bench leaderboard (fd2c1cd): EAGLE3, Vicuna-13B, A100, greedy, mean of 6 tasks"),
    "hydra": (3.26, "Spec-Bench leaderboard (fd2c1cd): Hydra, Vicuna-7B, A100/3090, greedy, mean of 6 tasks"),
    "dflash-long": (None, "as dflash"),
    "dflash": (None, "no acceptance length readable here (paper not in the corpus; z-lab's pages give speedups only)"),
    "pard": (None, "no acceptance length readable here (paper not in the corpus; AMD's README gives tok/s and speedups)"),
    "space": (None, "no SPACE row in the stored leaderboard; paper not in the corpus"),
}
TRAINED = ("eagle3", "hydra", "dflash", "dflash-long", "pard", "space")
GROUPS = (("base", "base"), ("dflash-long", "base (DFlash 3000 steps)"), ("space", "SPACE-tuned"))


def scrub(study: Path, checkpoints: str | None) -> int:
    repo = Path(__file__).resolve().parents[3]
    subs = []
    if checkpoints:
        subs += [(str(Path(checkpoints).resolve()), "CHECKPOINTS"), (checkpoints.rstrip("/"), "CHECKPOINTS")]
    subs += [(str(repo) + "/", ""), (str(repo), "."), (os.path.expanduser("~"), "~")]
    n = 0
    for p in sorted([*(study / "runs").rglob("*"), *(study / "training").rglob("*")]):
        if p.is_symlink() or not p.is_file() or p.suffix not in (".json", ".jsonl", ".md", ".csv", ".txt", ".log"):
            continue
        t = p.read_text(encoding="utf-8", errors="replace")
        t2 = t
        for a, b in subs:
            if a and a not in ("/", "."):
                t2 = t2.replace(a, b)
        if t2 != t:
            atomic_write(p, t2)
            n += 1
    return n


def record_params(study: Path, checkpoints: str) -> None:
    """Trained parameter counts of the folders that record none (pard: the whole drafter, space: the
    whole target), read from their safetensors headers into training/<name>/params.json."""
    from math import prod

    from specbench_cli.models.weights import safetensors_header
    for name in ("pard", "space"):
        f = Path(checkpoints) / name / "model.safetensors"
        if f.is_file() and (study / "training" / name).is_dir():
            total = sum(prod(shape) for _, shape in safetensors_header(f).values())
            atomic_write(study / "training" / name / "params.json", json.dumps({"params": total}) + "\n")


def last_run(folder: Path) -> Path | None:
    runs = sorted(d for d in folder.glob("2*") if (d / "report" / "table.json").is_file())
    return runs[-1] if runs else None


def rows_of(folder: Path) -> tuple[list[dict], dict, Path | None]:
    run = last_run(folder)
    if run is None:
        return [], {}, None
    table = json.loads((run / "report" / "table.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    return table["rows"], manifest, run


def fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def speed_table(study: Path) -> list[str]:
    out = []
    for dt in ("float32", "bfloat16"):
        groups = [(label, *rows_of(study / "runs" / dt / name)) for name, label in GROUPS]
        groups = [g for g in groups if g[1]]
        if not groups:
            continue
        ar_base = next((r["tokens_per_s"] for r in groups[0][1] if r["method_label"] == "ar"), None) \
            if groups[0][0] == "base" else None
        runs = ", ".join(f"{label}: `{run.relative_to(study)}`" for label, _, _, run in groups)
        out += [f"**{dt}** ({runs})", "",
                "| target | method | #MAT | tok/s | speedup vs its run's AR | vs the base run's AR | =AR | p1 | p2 | p3 |",
                "| :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for label, rows, _, _ in groups:
            for r in rows:
                vs_base = r["tokens_per_s"] / ar_base if ar_base else None
                out.append(f"| {label} | {r['method_label']} | {fmt(r['mat'])} | {fmt(r['tokens_per_s'], '.1f')} | "
                           f"{fmt(r['speedup_overall'])}x | {fmt(vs_base)}x | "
                           f"{fmt(r.get('ar_agreement'))} | {fmt(r.get('alpha1'))} | {fmt(r.get('alpha2'))} | "
                           f"{fmt(r.get('alpha3'))} |")
        out += [""]
        for _, _, man, _ in groups:
            host = man.get("host", {})
            out.append(f"- `{man.get('run_id')}`: {host.get('cpu_model')} ({', '.join(host.get('cpu_flags', []))}), "
                       f"{host.get('cpu_count')} CPUs; timing conditions {json.dumps(man.get('timing_conditions'))[:240]}")
        out += [""]
    return out


def training_table(study: Path) -> list[str]:
    data = {}
    dw = study / "training" / "data-wall.json"
    if dw.is_file():
        data = json.loads(dw.read_text())
    out = [f"Self-distillation data: {fmt(data.get('seconds'), '.0f')} s to generate (see README for rows/tokens).", "",
           "| model | trained params | steps x batch | data rows | data tokens (response) | wall time | held-out |",
           "| :--- | ---: | ---: | ---: | ---: | ---: | :--- |"]
    for name in TRAINED:
        d = study / "training" / name
        if not d.is_dir():
            continue
        t = json.loads((d / "training.json").read_text()) if (d / "training.json").is_file() else {}
        w = json.loads((d / "wall.json").read_text()) if (d / "wall.json").is_file() else {}
        pj = d / "params.json"
        params = t.get("params") or (json.loads(pj.read_text())["params"] if pj.is_file() else None)
        steps = t.get("steps_done") or t.get("steps")
        batch = (t.get("train_config") or {}).get("batch_size") or (t.get("recipe") or {}).get("batch_size")
        rows = t.get("data_sequences") or t.get("train_examples") or t.get("examples")
        toks = t.get("data_tokens")
        resp = t.get("data_response_tokens")
        held = held_out(name, t)
        out.append(f"| {name} | {fmt(params, ',')} | {steps} x {batch} | {rows if rows is not None else '–'} | "
                   f"{fmt(toks, ',')} ({fmt(resp, ',')}) | {fmt(w.get('seconds'), '.0f')} s (load {w.get('load_end', '–')}) "
                   f"| {held} |")
    return out + [""]


def held_out(name: str, t: dict) -> str:
    keys = [k for k in t if k.startswith(("eval_top1", "eval_ce", "eval_after", "eval_loss"))]
    parts = []
    for k in keys[:4]:
        v = t[k]
        if isinstance(v, (int, float)):
            parts.append(f"{k} {v:.3f}")
        elif isinstance(v, dict):
            parts.append(f"{k} " + ", ".join(f"{a} {b:.3f}" for a, b in list(v.items())[:3] if isinstance(b, (int, float))))
    return "; ".join(parts) or "–"


def quality_table(study: Path) -> list[str]:
    out = ["| model | GSM8K correct (Spec-Bench math) | tok/s (AR) |", "| :--- | ---: | ---: |"]
    any_ = False
    for name in ("base", "space"):
        rows, _, run = rows_of(study / "runs" / "quality" / name)
        if not rows:
            continue
        any_ = True
        r = rows[0]
        q = r.get("quality_gsm8k")
        n = count_scored(run)
        right = round(q * n) if q is not None else None
        out.append(f"| {name} | {right}/{n} ({fmt(q, '.3f')}) | {fmt(r['tokens_per_s'], '.1f')} |")
    if not any_:
        return []
    return out + [""] + agreement(study) + [""]


def answers(run: Path) -> dict:
    got = {}
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("method") == "ar":
            got[(row.get("question_id"), row.get("turn"))] = row.get("output_ids") or []
    return got


def agreement(study: Path) -> list[str]:
    """How far the SPACE-tuned model's AR answers follow the base model's: equal answers and the
    mean shared prefix in tokens."""
    runs = [last_run(study / "runs" / "quality" / n) for n in ("base", "space")]
    if None in runs:
        return []
    a, b = (answers(r) for r in runs)
    keys = sorted(set(a) & set(b), key=str)
    if not keys:
        return []
    same = sum(a[k] == b[k] for k in keys)
    prefix = []
    for k in keys:
        n = 0
        for x, y in zip(a[k], b[k]):
            if x != y:
                break
            n += 1
        prefix.append(n)
    mean_len = sum(len(a[k]) for k in keys) / len(keys)
    return [f"- The SPACE-tuned model's answers equal the base model's on {same} of {len(keys)} questions; "
            f"they share their first {sum(prefix) / len(prefix):.1f} tokens on average (base answers: "
            f"{mean_len:.1f} tokens)."]


def count_scored(run: Path) -> int:
    n = 0
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        n += 1 if row.get("scorer") == "gsm8k" and row.get("method") in (None, "ar") else 0
    return n


def paper_table(study: Path) -> list[str]:
    out = ["| method | our #MAT (float32, BC 10) | paper's AL | paper's setting | ours / paper |",
           "| :--- | ---: | ---: | :--- | ---: |"]
    base, _, _ = rows_of(study / "runs" / "float32" / "base")
    space, _, _ = rows_of(study / "runs" / "float32" / "space")
    long, _, _ = rows_of(study / "runs" / "float32" / "dflash-long")
    mats = {r["method_label"].split("(")[0]: r["mat"] for r in base + space}
    mats.update({"dflash-long": r["mat"] for r in long if r["method_label"].startswith("dflash")})
    for name in TRAINED:
        al, setting = PAPER_AL[name]
        ours = mats.get(name)
        ratio = ours / al if (ours and al) else None
        out.append(f"| {name} | {fmt(ours)} | {fmt(al)} | {setting or '–'} | {fmt(ratio)} |")
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("study", type=Path)
    ap.add_argument("--checkpoints")
    ap.add_argument("--scrub", action="store_true")
    a = ap.parse_args()
    if a.scrub:
        scrub(a.study, a.checkpoints)
    if a.checkpoints:
        record_params(a.study, a.checkpoints)
    lines = ["# drafters-2026: tables (written by table.py from the run folders and training records)", "",
             "## Speed on 18 Spec-Bench questions (64 new tokens, BC 10, greedy, 2 threads)", ""]
    lines += speed_table(a.study)
    lines += ["## Training", ""] + training_table(a.study)
    q = quality_table(a.study)
    if q:
        lines += ["## Answer quality: SPACE-tuned vs base (AR answers, 20 Spec-Bench math questions, 192 tokens)", ""] + q
    lines += ["## Against the papers", ""] + paper_table(a.study)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
