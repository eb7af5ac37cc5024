"""The MSN paper's tables at small scale, from run folders and training summaries only.

    python results/reference/msn/msn_tables.py -o results/reference/msn/tables \
        --eval base=RUN --eval sft=RUN --eval msn4=RUN [--eval msn1=RUN --eval msn8=RUN] \
        --window sft=DIR --window msn4=DIR [--training sft=training.json ...] \
        [--quality base=RUN --quality sft=RUN ... [--execute-code]]

- table2.md (their Table 2): per model and method, #MAT, Spec-Bench speedup over AR (same run,
  same questions), tokens/s, agreement with AR, and the relative change of #MAT and speedup
  against the `sft` model (the MSN rows' "↑x%").
- table3.md (their Table 3): noise length L (sft = no noise) vs #MAT / speedup of the Jacobi-like
  methods, with the held-out probe from training.json (top-1 after ahead noise, clean CE).
- fig4.png / fig4.md (their Fig. 4): Jacobi window length (BC - 1) vs #MAT per model, from
  `--window NAME=DIR` (repeatable) where DIRs hold run folders at several block complexities
  (any depth; the BC 10 evaluation run can be one of them: its jacobi rows are window 9).
- quality.md (their quality columns, `--quality NAME=RUN_OR_DIR`, repeatable): per model and
  scorer, the AR rows' answer quality
  (GSM8K exact match; HumanEval pass@1 only with --execute-code, which runs model-written code
  in `sandbox.run_untrusted`) with n and a 95 % Wilson interval, and the paired comparison with
  `sft` on the questions both answered: how many only sft / only the model got right, and the
  exact McNemar p-value. Only `ar` rows are scored: lossless methods reproduce AR's tokens in
  float32 (each run's AR agreement column checks it), so their quality is AR's.
Model names are the NAME given here (not the folder names). Nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from specbench_cli.atomic import atomic_write  # replaces a link at the name, never writes through it

JACOBI_LIKE = ("jacobi", "tr-jacobi", "lookahead")


def _pairs(items: list[str], what: str) -> dict[str, list[Path]]:
    """NAME=PATH items -> {NAME: [PATH, ...]} (a NAME may be given several times)."""
    out: dict[str, list[Path]] = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"error: {what} expects NAME=PATH, got '{item}'")
        out.setdefault(name, []).append(Path(path))
    return out


def summary_of(runs: dict[str, list[Path]]):
    """Overall metrics per (model NAME, method, block complexity) of the given run folders."""
    import pandas as pd

    from specbench_cli.report.metrics import summarize
    from specbench_cli.store.runfolder import load_run

    rows = []
    for name, folders in runs.items():
        for folder in folders:
            rows += [{**r, "model": name} for r in load_run(folder).tagged_rows()]
    if not rows:
        return pd.DataFrame()
    s = summarize(rows, by=("model", "method", "block_complexity", "category"))
    return s[s["category"] == "overall"]


def _fmt(x: float, digits: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _x(speedup: float) -> str:
    text = _fmt(speedup)
    return text if text == "–" else text + "x"


def _change(before: float, after: float) -> str:
    from specbench_cli.report.table import relative_change

    return relative_change(before, after)


def table2(s, ref: str = "sft") -> str:
    order = list(dict.fromkeys(s["model"]))
    lines = ["| model | method | #MAT | speedup | tokens/s | questions | AR agreement | #MAT vs sft | speedup vs sft |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = {m: r for m, r in s[s["model"] == ref].set_index("method").iterrows()} if ref in order else {}
    for model in order:
        for _, r in s[s["model"] == model].iterrows():
            b = base.get(r["method"])
            rel = (_change(b["mat"], r["mat"]), _change(b["speedup"], r["speedup"])) \
                if b is not None and model not in (ref, "base") else ("", "")
            agree = "–" if r["method"] == "ar" else f"{_fmt(r['ar_agreement'] * 100, 0)}%"
            lines.append(f"| {model} | {r['method']} | {_fmt(r['mat'])} | {_x(r['speedup'])} | "
                         f"{_fmt(r['tokens_per_s'], 1)} | {r['n_questions']} | {agree} | {rel[0]} | {rel[1]} |")
    return "\n".join(lines) + "\n"


def table3(s, training: dict[str, Path]) -> str:
    methods = [m for m in JACOBI_LIKE if m in set(s["method"])]
    head = ["model", "L"] + [f"{m} #MAT" for m in methods] + [f"{m} speedup" for m in methods] + \
           ["probe: top-1 after noise", "probe: clean CE"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in dict.fromkeys(s["model"]):
        sub = s[s["model"] == model].set_index("method")
        info = json.loads(training[model].read_text()) if model in training else {}
        noise = info.get("noise") or {}
        length = str(noise.get("length", "–")) if info else "–"
        if info and not noise:
            length = "0 (sft)"
        after = info.get("eval_after", info.get("eval_before", {})) if info else {}
        cells = [model, length] + [_fmt(sub.loc[m, "mat"]) if m in sub.index else "–" for m in methods] + \
                [_x(sub.loc[m, "speedup"]) if m in sub.index else "–" for m in methods] + \
                [_fmt(after.get("noise_top1"), 3), _fmt(after.get("ce"), 3)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fig4(s, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jac = s[s["method"] == "jacobi"].sort_values("block_complexity")
    bcs = sorted(set(int(b) for b in jac["block_complexity"]))
    lines = ["| model | " + " | ".join(f"window {b - 1}" for b in bcs) + " |", "|---|" + "---|" * len(bcs)]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for model in dict.fromkeys(jac["model"]):
        sub = jac[jac["model"] == model]
        by_bc = dict(zip(sub["block_complexity"].astype(int), sub["mat"]))
        lines.append(f"| {model} | " + " | ".join(_fmt(by_bc.get(b)) for b in bcs) + " |")
        ax.plot([b - 1 for b in sub["block_complexity"]], sub["mat"], marker="o", label=model)
    ax.set_xlabel("Jacobi window (draft tokens per step = BC - 1)")
    ax.set_ylabel("#MAT")
    ax.set_xscale("log", base=2)
    ax.set_xticks([b - 1 for b in bcs], [str(b - 1) for b in bcs])
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Jacobi window vs #MAT (MSN Fig. 4 analog)")
    fig.tight_layout()
    atomic_write(out / "fig4.png", lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
    return "\n".join(lines) + "\n"


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for b and c discordant pairs (binomial, p = 1/2)."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def _run_folders(path: Path) -> list[Path]:
    """`path` itself when it is a run folder (or does not exist: load_run says so), else every
    run folder under it."""
    if (path / "manifest.json").is_file() or not path.is_dir():
        return [path]
    return sorted(m.parent for m in path.rglob("manifest.json")) or [path]


def quality_scores(runs: dict[str, list[Path]], execute_code: bool = False) -> dict:
    """{(model, scorer): {(question_id, turn, repeat): 1.0 / 0.0 / None}} of the runs' `ar` rows
    that carry a scorer (None: not scorable, e.g. HumanEval without `execute_code`)."""
    from specbench_cli.errors import UsageError
    from specbench_cli.scoring.quality import scored_rows
    from specbench_cli.store.runfolder import load_run

    out: dict = {}
    for name, given in runs.items():
        for folder in (f for g in given for f in _run_folders(g)):
            ar = [r for r in load_run(folder).rows if r.get("method") == "ar"]
            for r in scored_rows(ar, execute_code):
                key = (str(r["question_id"]), int(r.get("turn", 0)), int(r.get("repeat", 0)))
                got = out.setdefault((name, r["scorer"]), {})
                if key in got:  # two answers to one question would be counted twice: refuse
                    raise UsageError(f"--quality {name}: question {key[0]} (turn {key[1]}) is in two of its runs")
                got[key] = r["quality"]
    return out


def quality_table(scores: dict, ref: str = "sft") -> str:
    """Markdown: score with n and Wilson interval per (model, scorer); paired counts vs `ref`
    on the questions both scored; a note for answers that could not be scored."""
    from specbench_cli.scoring.quality import METRIC_NAMES, wilson

    lines = [f"| model | metric | n | correct | score | 95% Wilson | paired with {ref} | only {ref} right | "
             "only model right | McNemar p |", "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    scorers = list(dict.fromkeys(sc for _, sc in scores))
    for (model, scorer), every in sorted(scores.items(), key=lambda kv: scorers.index(kv[0][1])):  # stable
        got = {q: v for q, v in every.items() if v is not None}
        if len(got) < len(every):
            notes.append(f"{model} {scorer}: {len(every) - len(got)} answers not scored"
                         + (" (pass@1 needs --execute-code)" if scorer == "humaneval" else "") + ".")
        k, n = int(sum(got.values())), len(got)
        low, high = wilson(k, n)
        paired = ["", "", "", ""]
        other = {q: v for q, v in scores.get((ref, scorer), {}).items() if v is not None}
        if other and model != ref:
            both = set(got) & set(other)
            b = sum(other[q] > got[q] for q in both)
            c = sum(got[q] > other[q] for q in both)
            paired = [str(len(both)), str(b), str(c), f"{mcnemar_p(b, c):.2f}"]
        score = f"{100 * k / n:.1f}% | [{100 * low:.1f}%, {100 * high:.1f}%]" if n else "– | –"
        lines.append(f"| {model} | {METRIC_NAMES.get(scorer, scorer)} ({scorer}) | {n} | {k} | {score} | "
                     + " | ".join(paired) + " |")
    return "\n".join(lines) + "\n" + "".join(f"\n{n}\n" for n in notes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="MSN Table 2 / Table 3 / Fig. 4 analogs from run folders.")
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--eval", action="append", default=[], help="NAME=RUN_FOLDER (BC 10, all methods)")
    ap.add_argument("--window", action="append", default=[], help="NAME=DIR of jacobi runs at several BCs")
    ap.add_argument("--training", action="append", default=[], help="NAME=training.json")
    ap.add_argument("--quality", action="append", default=[], help="NAME=RUN_FOLDER (or a DIR of run folders) whose AR rows are scored")
    ap.add_argument("--execute-code", action="store_true",
                    help="Score HumanEval pass@1: runs model-written code, each program sandboxed.")
    args = ap.parse_args(argv)
    from specbench_cli.errors import UsageError

    try:
        return _write(args)
    except UsageError as exc:  # a missing or malformed run folder: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _write(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    evals, windows, training = (_pairs(args.eval, "--eval"), _pairs(args.window, "--window"),
                                _pairs(args.training, "--training"))
    quality = _pairs(args.quality, "--quality")
    if evals:
        training = {k: v[-1] for k, v in training.items()}
        s = summary_of(evals)
        for name, text in (("table2.md", table2(s)), ("table3.md", table3(s, training))):
            atomic_write(args.out / name, text)
            print(f"## {name}\n{text}")
    if windows:
        folders = {k: sorted(m.parent for d in v for m in d.rglob("manifest.json")) for k, v in windows.items()}
        text = fig4(summary_of(folders), args.out)
        atomic_write(args.out / "fig4.md", text)
        print(f"## fig4.md\n{text}")
    if quality:
        text = quality_table(quality_scores(quality, args.execute_code))
        atomic_write(args.out / "quality.md", text)
        print(f"## quality.md\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
