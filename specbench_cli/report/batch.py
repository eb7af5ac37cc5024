"""Batch size N: what batching does to each method, from result rows alone (docs/batch.md).

One row per (model, method, BC, N), pooled over categories:

- `throughput`: tokens/s summed over a batch. A batch is the rows of one (run, repeat, batch id,
  turn), decoded together; its time is its last member's `wall_time` (every member's clock starts
  with the batch). Pooled: all tokens over all batches' times. At N = 1 every row is a batch;
- `tokens_per_s`: per-sequence tokens/s, the mean over questions of each question's tokens over
  its own wall time (the main table's Tok/s);
- `tpot_ms`: time per output token after a sequence's first: sum(wall - prefill) / sum(tokens - 1);
- `speedup`: the main table's speedup (per question, paired) over AR *at the same N*;
  `throughput_ratio`: the method's throughput over AR's at the same N;
- `ar_gain`: AR's throughput at N over AR's at N = 1 (when a run at N = 1 is loaded);
- `mat`: #MAT; `ar_agreement`: =AR at the same N;
- `batch_agreement` (cross-batch agreement): the share of answers equal to the same method's
  answer at N = 1 for the same question, turn and repeat (when a run at N = 1 is loaded). Batched
  arithmetic (other matrix shapes, padded rows) may change a float's last bits and so a token;
  this measures whether it did;
- the crossover of a method: the smallest N measured at which its speedup is below 1.0x.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from specbench_cli.report import metrics
from specbench_cli.report.metrics import is_ar_label, label_suffix
from specbench_cli.report.table import Column, TableData

KEY = ["model", "method_label", "block_complexity", "batch_size"]
ANSWER = ["model", "method_label", "task", "question_id", "turn", "repeat"]


def _batch_throughput(ok: pd.DataFrame) -> pd.DataFrame:
    """Per KEY: tokens and seconds summed over batches (a batch's time is its last member's)."""
    frame = ok.assign(batch=[b if b is not None and b == b else f"q{q}" for b, q in
                             zip(ok["batch_id"], ok["question_id"])])
    batches = frame.groupby(KEY + ["run_id", "repeat", "turn", "batch"], sort=False, dropna=False).agg(
        tokens=("new_tokens", "sum"), seconds=("wall_time", "max")).reset_index()
    out = batches.groupby(KEY, sort=False).agg(tokens=("tokens", "sum"), seconds=("seconds", "sum")).reset_index()
    out["throughput"] = [t / s if s > 0 else float("nan") for t, s in zip(out["tokens"], out["seconds"])]
    return out[KEY + ["throughput"]]


def _tpot(ok: pd.DataFrame) -> pd.DataFrame:
    frame = ok[ok["new_tokens"] > 1]
    frame = frame.assign(decode=frame["wall_time"] - frame["prefill_time"], after_first=frame["new_tokens"] - 1)
    out = frame.groupby(KEY, sort=False).agg(decode=("decode", "sum"), after_first=("after_first", "sum")).reset_index()
    out["tpot_ms"] = 1000 * out["decode"] / out["after_first"]
    return out[KEY + ["tpot_ms"]]


def _batch_agreement(ok: pd.DataFrame) -> pd.DataFrame:
    """Per KEY with N > 1: the share of answers equal to the same method's at N = 1."""
    single = {tuple(r[k] for k in ANSWER): r["output_ids"] for _, r in ok[ok["batch_size"] == 1].iterrows()}
    records = []
    for key, group in ok[ok["batch_size"] > 1].groupby(KEY, sort=False):
        same = [list(r["output_ids"]) == list(single[a]) for _, r in group.iterrows()
                if (a := tuple(r[k] for k in ANSWER)) in single]
        records.append({**dict(zip(KEY, key)), "batch_agreement": float(np.mean(same)) if same else float("nan"),
                        "batch_compared": len(same)})
    return pd.DataFrame(records, columns=KEY + ["batch_agreement", "batch_compared"])


def batch_summary(rows: Sequence[dict] | pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method_label, BC, N) with the module doc's metrics, AR first, then by
    method and N."""
    df = metrics.to_frame(rows)
    for key, default in (("prefill_time", 0.0), ("output_ids", None)):
        if key not in df.columns:
            df[key] = [default] * len(df)
    if df.empty:
        return pd.DataFrame(columns=KEY)
    base = metrics.summarize(df, by=KEY, overall=False)
    base = base[KEY + ["n_questions", "mat", "tokens_per_s", "speedup", "ar_agreement", "lossless"]]
    ok = metrics.ok_rows(df)
    ok = ok.assign(output_ids=[v if isinstance(v, list) else [] for v in ok["output_ids"]],
                   prefill_time=ok["prefill_time"].fillna(0.0))
    out = base.merge(_batch_throughput(ok), on=KEY, how="left").merge(_tpot(ok), on=KEY, how="left") \
        .merge(_batch_agreement(ok), on=KEY, how="left")
    # AR of the same model, N and temperature (a sweep's labels carry theirs: metrics.label_temperatures)
    is_ar = out["method_label"].map(is_ar_label).astype(bool)
    temp = out["method_label"].map(label_suffix)
    ar = out[is_ar].assign(_t=temp[is_ar]).set_index(["model", "_t", "batch_size"])["throughput"]
    ar_one = out[is_ar & (out["batch_size"] == 1)].assign(_t=temp).set_index(["model", "_t"])["throughput"]
    out["throughput_ratio"] = [ar_ratio(t, ar, (m, x, n)) for m, x, n, t in
                               zip(out["model"], temp, out["batch_size"], out["throughput"])]
    out["ar_gain"] = [ar[(m, x, n)] / ar_one[(m, x)] if a and (m, x) in ar_one.index and (m, x, n) in ar.index
                      else float("nan") for m, x, a, n in zip(out["model"], temp, is_ar, out["batch_size"])]
    order = out.assign(_not_ar=~is_ar)
    order = order.sort_values(["model", "_not_ar", "method_label", "block_complexity", "batch_size"], kind="stable")
    return out.loc[order.index].reset_index(drop=True)


def ar_ratio(throughput: float, ar: pd.Series, key: tuple) -> float:
    return throughput / ar[key] if key in ar.index else float("nan")


def series_key(row: pd.Series) -> tuple:
    """One curve per (model, method) across N; a method at a fixed BC is one curve per BC, an
    @auto instance one curve whatever budget it chose at each N."""
    label = str(row["method_label"])
    return (row["model"], label) if "@auto" in label else (row["model"], label, int(row["block_complexity"]))


def crossovers(summary: pd.DataFrame) -> dict[tuple, Optional[int]]:
    """Per drafting series (`series_key`): the smallest N whose speedup is below 1.0, or None."""
    out: dict[tuple, Optional[int]] = {}
    for _, row in summary[~summary["method_label"].map(is_ar_label).astype(bool)].sort_values("batch_size").iterrows():
        key = series_key(row)
        out.setdefault(key, None)
        if out[key] is None and np.isfinite(row["speedup"]) and row["speedup"] < 1.0:
            out[key] = int(row["batch_size"])
    return out


def batch_table(summary: pd.DataFrame) -> TableData:
    """The per-(method, N) table; notes name each method's crossover N."""
    frame = summary.copy()
    frame["method_label"] = [f"{m} (lossy)" if lossless is False else m
                             for m, lossless in zip(frame["method_label"], frame["lossless"])]
    cols = [Column("Model", "model", numeric=False)] if frame["model"].nunique() > 1 else []
    cols += [Column("Method", "method_label", numeric=False), Column("BC", "block_complexity", digits=0),
             Column("N", "batch_size", digits=0), Column("#MAT", "mat"),
             Column("Thr. tok/s", "throughput", digits=1), Column("Thr. ×AR", "throughput_ratio"),
             Column("Seq tok/s", "tokens_per_s", digits=1), Column("TPOT ms", "tpot_ms", digits=1),
             Column("Speedup", "speedup"), Column("=AR", "ar_agreement"), Column("=N1", "batch_agreement"),
             Column("AR gain", "ar_gain")]
    notes = ["Thr.: tokens/s summed over each batch; Seq: per-sequence tokens/s; Speedup and ×AR: over AR at the "
             "same N; =N1: answers equal to the same method's at batch size 1; AR gain: AR's throughput over its "
             "throughput at N = 1 (docs/batch.md)."]
    for key, n in crossovers(summary).items():
        name = " ".join(str(k) for k in key[1:2]) + (f" (BC {key[2]})" if len(key) > 2 else "")
        if summary["model"].nunique() > 1:
            name = f"{key[0]} · {name}"
        measured = sorted(summary.loc[[series_key(r) == key for _, r in summary.iterrows()], "batch_size"])
        notes.append(f"{name}: below 1.0x from N = {n}." if n is not None else
                     f"{name}: at or above 1.0x at every N measured ({', '.join(map(str, measured))}).")
    sizes = ", ".join(str(n) for n in sorted(summary["batch_size"].unique()))
    models = ", ".join(dict.fromkeys(summary["model"].astype(str)))
    return TableData(f"Batch size — {models}, N = {sizes}", cols, frame.reset_index(drop=True), notes)


def plot_batch(summary: pd.DataFrame, directory: Path, stem: str = "speedup_vs_batch_size") -> list[Path]:
    """Three panels against N (log scale): speedup over AR at the same N (the crossover marked),
    #MAT, and throughput summed over the batch (AR included)."""
    import matplotlib.pyplot as plt

    from specbench_cli.report.plots import COLORS, STYLE, plot_text, save_figure

    sizes = sorted(int(n) for n in summary["batch_size"].unique())
    series: dict[tuple, pd.DataFrame] = {}
    for _, row in summary.sort_values("batch_size").iterrows():
        key = series_key(row) if not is_ar_label(row["method_label"]) else (row["model"], row["method_label"])
        series.setdefault(key, [])
        series[key].append(row)
    crossing = crossovers(summary)
    with_model = summary["model"].nunique() > 1

    def label(key: tuple) -> str:
        text = f"{plot_text(key[0])} · {plot_text(key[1])}" if with_model else plot_text(key[1])
        return text + (f" (BC {key[2]})" if len(key) > 2 else "")

    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.9))
        for i, (key, rows) in enumerate(series.items()):
            frame = pd.DataFrame(rows)
            color = "0.3" if is_ar_label(key[1]) else COLORS[i % len(COLORS)]
            if not is_ar_label(key[1]):
                axes[0].plot(frame["batch_size"], frame["speedup"], marker="o", color=color, label=label(key))
                axes[1].plot(frame["batch_size"], frame["mat"], marker="o", color=color)
                n = crossing.get(key)
                if n is not None:
                    y = float(frame.loc[frame["batch_size"] == n, "speedup"].iloc[0])
                    axes[0].plot([n], [y], marker="o", markersize=12, markerfacecolor="none", color="tab:red")
                    axes[0].annotate(f"N={n}", (n, y), textcoords="offset points", xytext=(6, -12), fontsize=8,
                                     color="tab:red")
            axes[2].plot(frame["batch_size"], frame["throughput"], marker="o", color=color,
                         linestyle="--" if is_ar_label(key[1]) else "-",
                         label=label(key) if is_ar_label(key[1]) else None)
        axes[0].axhline(1.0, color="0.3", linestyle="--", linewidth=1, label="AR at the same N (1.00×)")
        titles = ("Speedup over AR at the same N", "#MAT", "Throughput (tokens/s, summed over the batch)")
        ylabels = ("Speedup (×)", "#MAT (tokens per target forward)", "tokens/s")
        for ax, title, ylabel in zip(axes, titles, ylabels):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(n) for n in sizes])
            ax.minorticks_off()
            ax.set_xlabel("Batch size N")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.set_ylim(bottom=0)
            ax.grid(True, axis="x", alpha=0.3)
        handles, labels = [], []
        for ax in (axes[0], axes[2]):
            h, lab = ax.get_legend_handles_labels()
            handles += h
            labels += lab
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False)
        fig.tight_layout()
        return save_figure(fig, directory, stem)


def write_batch_report(rows: Sequence[dict] | pd.DataFrame, directory: Path, formats: Sequence[str],
                       plots: bool = True) -> tuple[Optional[TableData], list[Path]]:
    """The batch table (batch.<ext> per format) and figure, when any row ran at N > 1 or the
    rows span several N; (None, []) otherwise."""
    from specbench_cli.atomic import atomic_write
    from specbench_cli.report import formats as report_formats
    from specbench_cli.report import render

    frame = metrics.to_frame(rows)
    if frame.empty or (frame["batch_size"].nunique() < 2 and not (frame["batch_size"] > 1).any()):
        return None, []
    summary = batch_summary(frame)
    table = batch_table(summary)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = directory / f"batch.{report_formats.get(fmt).extension}"
        atomic_write(path, render.render(table, fmt, summary))
        written.append(path)
    if plots and summary["batch_size"].nunique() > 1:
        written += plot_batch(summary, directory)
    return table, written
