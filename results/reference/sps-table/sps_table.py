"""Draft-model speculative decoding: tau (#MAT), MBSU and speedup per drafter, gamma and decoding mode.

    python results/reference/sps-table/sps_table.py results/checkpoints/drafters/subclone-L4 results/checkpoints/drafters/kld \\
        results/checkpoints/drafters/tvd results/checkpoints/drafters/tvdpp --gammas 3,5 --limit 5 --max-new-tokens 128 \\
        --threads 2 --output-dir results/sps-table --table results/sps-table/table.md

One `specbench run` (Python API: `RunConfig` + `workflow.execute`) per (decoding mode, gamma),
at block complexity gamma + 1, holding AR and every drafter: each drafter is an alias of
`sps` (`sps-<folder name>`) with its own `draft_model` option, so per question AR runs first
and the drafters follow in rotating order in one process on one loaded target - the same
fairness rules as any run. Decoding modes: greedy, and sampling at temperature 0.6 / top-p 0.9
(`--modes` to change). Questions: Spec-Bench, `--limit` per category of `--categories`.

The table comes from the run folders alone (`runfolder` + `metrics.summarize`, the same code
as `specbench report`), so `--tabulate RUN_DIR...` rebuilds it without running anything.
Columns: tau = #MAT (tokens per target forward); MBSU = tau / (c * gamma + 1) with
c = drafter params / target params (metrics.mbsu, gamma = mean draft size); speedup = Spec-Bench
token-rate ratio against AR on the same questions (metrics.summarize "speedup"); tok/s of the
method and of AR; =AR = share of outputs identical to AR (greedy only; sampled outputs differ
from AR's by design, the seeds are shared but the random streams are consumed differently).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from specbench_cli import methods as method_registry
from specbench_cli.atomic import atomic_write
from specbench_cli.report.metrics import AR_METHOD, OVERALL, order_categories, summarize
from specbench_cli.tasks.categories import display_category
from specbench_cli.report.render import to_markdown
from specbench_cli.report.table import Column, TableData

SPEC_BENCH_CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
MODES = {"greedy": (0.0, 1.0), "t0.6": (0.6, 0.9)}
SPS_TARGET = "specbench_cli.methods.sps:SpeculativeSampling"


def alias_for(drafter: str, taken: set[str]) -> str:
    base = "sps-" + (Path(drafter).name or "draft").lower().replace("_", "-")
    name, i = base, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    taken.add(name)
    return name


def run_all(args) -> list[Path]:
    from specbench_cli.errors import SpecBenchError
    from specbench_cli.config import (
        BudgetSection,
        DecodingSection,
        MeasureSection,
        MethodsSection,
        ModelSection,
        OutputSection,
        RunConfig,
        TaskSection,
    )
    from specbench_cli.run.workflow import execute

    taken: set[str] = set()
    aliases = {alias_for(d, taken): d for d in args.drafters}
    for name in aliases:
        method_registry.register(name, SPS_TARGET)
    runs = []
    for mode in args.modes:
        temperature, top_p = MODES[mode]
        for gamma in args.gammas:
            cfg = RunConfig(
                model=ModelSection(name=args.model, dtype=args.dtype, device=args.device, threads=args.threads),
                methods=MethodsSection(names=["ar", *aliases], options={
                    a: {"draft_model": d, "gamma": gamma} for a, d in aliases.items()}),
                task=TaskSection(tasks=["spec_bench"], questions=args.questions, categories=args.categories,
                                 limit=args.limit),
                budget=BudgetSection(block_complexity=gamma + 1),
                decoding=DecodingSection(max_new_tokens=args.max_new_tokens, temperature=temperature, top_p=top_p,
                                         seed=args.seed),
                measure=MeasureSection(repeats=args.repeats),
                output=OutputSection(dir=str(Path(args.output_dir) / f"{mode}-g{gamma}")))
            cfg.validate()
            print(f"== {mode}, gamma {gamma} (BC {gamma + 1}): {', '.join(cfg.methods.names)}", file=sys.stderr, flush=True)
            try:
                runs.append(execute(cfg, report=False))
            except SpecBenchError as e:  # failed rows are recorded in the run; tabulate what there is
                print(f"   {e}", file=sys.stderr)
                runs.append(max((p for p in Path(cfg.output.dir).iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime))
    return runs


def mode_of(temperature: float, top_p: float) -> str:
    return "greedy" if temperature <= 0 else f"T={temperature:g}, top-p={top_p:g}"


def collect(run_dirs: list[Path], per_category: bool) -> tuple[pd.DataFrame, list[str]]:
    """One record per (run, method): overall (and per-category tau) metrics from `summarize`."""
    from specbench_cli.store.runfolder import load_runs

    records, notes = [], []
    for run in load_runs(run_dirs):
        rows = run.tagged_rows()
        if not rows:
            notes.append(f"{run.path}: no rows")
            continue
        summary = summarize(rows, by=("model", "method", "method_label", "block_complexity", "category"))
        cfg = run.manifest.get("config", {})
        mode = mode_of(float(cfg.get("temperature", 0.0)), float(cfg.get("top_p", 1.0)))
        ar = summary[(summary["method"] == AR_METHOD) & (summary["category"] == OVERALL)]
        ar_tps = float(ar["tokens_per_s"].iloc[0]) if len(ar) else math.nan
        for _, row in summary[(summary["category"] == OVERALL) & (summary["method"] != AR_METHOD)].iterrows():
            params = row["method_params"] or {}
            rec = {
                "drafter": Path(str(params.get("draft_model", row["method"]))).name,
                "gamma": params.get("gamma"), "mode": mode, "bc": row["block_complexity"],
                "mat": row["mat"], "mbsu": row["mbsu"], "c": row["c"], "speedup": row["speedup"],
                "tokens_per_s": row["tokens_per_s"], "ar_tokens_per_s": ar_tps,
                "ar_agreement": row["ar_agreement"] if mode == "greedy" else math.nan,
                "n_questions": row["n_questions"], "n_errors": row["n_errors"], "run": run.path.name,
            }
            if per_category:
                cats = summary[(summary["method_label"] == row["method_label"]) & (summary["category"] != OVERALL)]
                for _, c in cats.iterrows():
                    rec[f"mat_{c['category']}"] = c["mat"]
            records.append(rec)
            if row["n_errors"]:
                notes.append(f"{rec['drafter']} gamma {rec['gamma']} {mode}: {row['n_errors']} rows errored "
                             f"(left out; see {run.path}/samples.jsonl).")
            if mode == "greedy" and row["ar_mismatches"]:
                notes.append(f"{rec['drafter']} gamma {rec['gamma']}: {row['ar_mismatches']} of {row['ar_compared']} "
                             f"greedy outputs differ from AR.")
    frame = pd.DataFrame(records)
    if not frame.empty:
        frame["_sampled"] = frame["mode"] != "greedy"  # greedy rows first
        frame = frame.sort_values(["_sampled", "mode", "drafter", "gamma"]).drop(columns="_sampled")
        frame = frame.reset_index(drop=True)
    return frame, notes


def build_table(frame: pd.DataFrame, notes: list[str], model: str) -> TableData:
    cols = [Column("Drafter", "drafter", numeric=False), Column("γ", "gamma", digits=0),
            Column("Decoding", "mode", numeric=False)]
    cats = order_categories([c[len("mat_"):] for c in frame.columns if c.startswith("mat_")])
    cols += [Column(f"τ {display_category(c)}", f"mat_{c}") for c in cats]
    cols += [Column("τ (#MAT)", "mat"), Column("c", "c", digits=3), Column("MBSU", "mbsu"),
             Column("Speedup", "speedup"), Column("Tok/s", "tokens_per_s", digits=1),
             Column("AR tok/s", "ar_tokens_per_s", digits=1), Column("=AR", "ar_agreement")]
    n = ", ".join(sorted({str(int(q)) for q in frame["n_questions"]})) if len(frame) else "0"
    title = f"Draft-model speculative decoding (sps) on Spec-Bench — {model}, {n} questions per row"
    return TableData(title, cols, frame, notes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafters", nargs="*", help="draft model references (folders with the target's tokenizer)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--gammas", default="3,5", help="comma-separated draft lengths (BC = gamma + 1)")
    ap.add_argument("--modes", default="greedy,t0.6", help=f"comma-separated, from {', '.join(MODES)}")
    ap.add_argument("--categories", default=",".join(SPEC_BENCH_CATEGORIES))
    ap.add_argument("--limit", type=int, default=5, help="questions per category")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--questions", default=None, help="Spec-Bench question.jsonl (default: found locally)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--output-dir", default="results/sps-table")
    ap.add_argument("--table", default=None, help="Markdown file to write (default: OUTPUT_DIR/table.md)")
    ap.add_argument("--per-category", action="store_true", help="add a tau column per category")
    ap.add_argument("--tabulate", nargs="+", metavar="RUN_DIR", help="only build the table from these run folders")
    args = ap.parse_args()
    args.gammas = [int(g) for g in args.gammas.split(",") if g.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.categories = [c.strip() for c in args.categories.split(",") if c.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; choose from {list(MODES)}")
    if not args.tabulate and not args.drafters:
        ap.error("give at least one drafter (or --tabulate RUN_DIR...)")

    run_dirs = [Path(p) for p in args.tabulate] if args.tabulate else run_all(args)
    frame, notes = collect(run_dirs, args.per_category)
    if frame.empty:
        raise SystemExit("no sps rows in " + ", ".join(map(str, run_dirs)))
    notes.append("Runs: " + ", ".join(str(p) for p in run_dirs))
    text = to_markdown(build_table(frame, notes, args.model))
    print(text)
    out = Path(args.table) if args.table else Path(args.output_dir) / "table.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, text)
    atomic_write(out.with_suffix(".csv"), frame.to_csv(index=False))
    print(f"written: {out} and {out.with_suffix('.csv')}", file=sys.stderr)


if __name__ == "__main__":
    main()
