"""#MAT and speedup per turn of multi-turn questions (MT-bench's second turn, the `refine`
suite). A later turn often repeats the first one's answer, which drafters that retrieve from
earlier text turn into long accepted runs; the main table pools the turns and hides that.

Each turn is summarised on its own, as if every question had that one turn: #MAT pooled over the
turn's steps, the speedup pairing each method's turn with AR's same turn of the same question
and repeat (docs/metrics.md)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from specbench_cli.report import metrics
from specbench_cli.report.metrics import OVERALL
from specbench_cli.report.table import ROW_KEY, Column, TableData, row_keys

FILE_STEM = "turns"


def turn_summary(rows: Sequence[dict] | pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method label, BC, batch size, turn) with `mat`, `speedup`, `speedup_std` and
    `n_rows`; empty when no question has a second turn."""
    df = metrics.to_frame(rows)
    if df.empty or df["turn"].nunique() < 2:
        return pd.DataFrame()
    parts = []
    for turn, rows_of_turn in df.groupby("turn", sort=True):
        s = metrics.summarize(rows_of_turn, by=("model", "method_label", "block_complexity", "batch_size", "category"))
        parts.append(s[s["category"] == OVERALL].drop(columns="category").assign(turn=int(turn)))
    return pd.concat(parts, ignore_index=True)


def turn_table(summary: pd.DataFrame) -> TableData:
    """#MAT and speedup of each turn side by side, one row per (model, method[, BC])."""
    turns = sorted(summary["turn"].unique())
    keys = row_keys(summary.assign(category=OVERALL))
    wide = summary.set_index(ROW_KEY + ["turn"])[["mat", "speedup", "speedup_std"]].unstack("turn")
    wide.columns = [f"{name}_t{turn}" for name, turn in wide.columns]
    order = {key: i for i, key in enumerate(dict.fromkeys(summary[ROW_KEY].itertuples(index=False, name=None)))}
    frame = wide.reset_index()
    frame = frame.iloc[sorted(range(len(frame)), key=lambda i: order[tuple(frame.loc[i, ROW_KEY])])]
    is_ar = frame["method_label"].map(metrics.is_ar_label).astype(bool)
    for t in turns:  # AR is the baseline: a spread of its speedup of 1 says nothing
        if f"speedup_std_t{t}" in frame:
            frame.loc[is_ar, f"speedup_std_t{t}"] = float("nan")
    cols = []
    if frame["model"].nunique() > 1:
        cols.append(Column("Model", "model", numeric=False))
    cols.append(Column("Method", "method_label", numeric=False))
    if "block_complexity" in keys or frame["method_label"].astype(str).str.contains("@").any():
        cols.append(Column("BC", "block_complexity", digits=0))
    if frame["batch_size"].nunique() > 1:
        cols.append(Column("N", "batch_size", digits=0))
    cols += [Column(f"#MAT t{t + 1}", f"mat_t{t}") for t in turns]
    cols += [Column(f"Speedup t{t + 1}", f"speedup_t{t}", f"speedup_std_t{t}") for t in turns]
    return TableData("#MAT and speedup over AR per turn", cols, frame.reset_index(drop=True),
                     ["Each turn on its own: #MAT pooled over its steps; the speedup pairs it with AR's same turn."])
