"""Tables from `metrics.summarize` output: markdown, csv, LaTeX, json, and the terminal.

(The table model and its notes in one place; the file renderers are in render.py.)

The Spec-Bench table has one row per (model, method) — plus block complexity when a method
was measured at several — with the speedup of each category, then #MAT, tokens/s and the
overall speedup. Optional columns: `bc` (block complexity), `mbsu`, `params` (the drafter's
resolved configuration), `alpha` (KOALA's 1-/2-/3-alpha of chain drafters). With several
replicates a value reads "2.31 ± 0.04" (mean ± sample std of the per-replicate speedups).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from typing import Iterable

import pandas as pd
from rich import box
from rich.markup import escape
from rich.table import Table

from specbench_cli.console import out
from specbench_cli.names import baseline_of
from specbench_cli.report import metrics
from specbench_cli.report.metrics import (
    AR_METHOD,
    OVERALL,
    is_ar_label,
    is_baseline_label,
    label_suffix,
    order_categories,
    plain_label,
)
from specbench_cli.tasks.categories import display_category

OPTIONAL_COLUMNS = ("bc", "mbsu", "params", "median", "agree", "alpha")
DEFAULT_COLUMNS = ("median", "agree")  # `report` and the table at the end of `run`: Median and =AR
MISSING = "–"
ROW_KEY = ["model", "method_label", "block_complexity", "batch_size"]


@dataclass(frozen=True)
class Column:
    """One table column: header text, numeric key in the wide frame, optional std key."""

    header: str
    key: str
    std_key: str | None = None
    digits: int = 2
    numeric: bool = True
    share_key: str | None = None  # a share (0..1) shown after the value: "1.23 (12%)"
    interval: tuple[str, str] | None = None  # keys of an interval shown after the value: "1.23 [1.10, 1.35]"


@dataclass
class TableData:
    """A table ready to render: its columns, the wide numeric frame, a title and notes."""

    title: str
    columns: list[Column]
    frame: pd.DataFrame
    notes: list[str]

    @property
    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def cells(self) -> list[list[str]]:
        """Every row as display strings."""
        return [[cell_text(row, col) for col in self.columns] for _, row in self.frame.iterrows()]


# ----------------------------------------------------------------------------- values


def format_value(mean: float | None, std: float | None = None, digits: int = 2) -> str:
    """'2.31', or '2.31 ± 0.04' when a std is known; '–' for a missing value."""
    if mean is None or not math.isfinite(mean):
        return MISSING
    text = f"{mean:.{digits}f}"
    if std is not None and math.isfinite(std):
        text += f" ± {std:.{digits}f}"
    return text


# Characters a label read from a run folder must not carry onto a terminal, into a markdown row
# or into a figure: control characters (ESC starts terminal escape sequences, a newline ends a
# markdown row), line and paragraph separators, and the bidirectional overrides that make text
# read other than it is.
_UNPRINTABLE = {0x2028, 0x2029, 0x85, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def printable(text: object, limit: int | None = None) -> str:
    """`text` as one plain line: each control or layout character a space, and at most `limit`
    characters (the rest cut to "…")."""
    import unicodedata

    text = str(text)
    if not text.isprintable():
        text = "".join(" " if ord(ch) in _UNPRINTABLE or unicodedata.category(ch) == "Cc" else ch for ch in text)
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "…"
    return text


def cell_text(row: pd.Series, column: Column) -> str:
    """Display text of one cell of the wide frame (labels from a run folder made `printable`)."""
    value = row.get(column.key)
    if not column.numeric:
        return MISSING if value is None or value == "" else printable(value)
    std = row.get(column.std_key) if column.std_key else None
    text = format_value(_float(value), _float(std), column.digits)
    share = _float(row.get(column.share_key)) if column.share_key else None
    if text != MISSING and share is not None and math.isfinite(share):
        text += f" ({100 * share:.0f}%)"
    if text != MISSING and column.interval:
        low, high = (_float(row.get(k)) for k in column.interval)
        if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
            text += f" [{low:.{column.digits}f}, {high:.{column.digits}f}]"
    return text


def _float(value: object) -> float | None:
    """A finite-or-NaN float, or None for missing values."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def format_params(params: dict | None) -> str:
    """A drafter's configuration compactly: 'W=5, N=3, G=3' (nested values as JSON)."""
    if not params:
        return ""
    parts = []
    for key, value in params.items():
        text = value if isinstance(value, (str, int, float, bool)) else json.dumps(value, separators=(",", ":"))
        parts.append(f"{key}={text}")
    return ", ".join(parts)


def relative_change(before: float, after: float) -> str:
    """'+34% ↑', '-12% ↓' or '±0% =' (under half a percent); '–' if either is missing."""
    if not (math.isfinite(before) and math.isfinite(after)) or before == 0:
        return MISSING
    change = (after - before) / abs(before) * 100
    if abs(change) < 0.5:
        return "±0% ="
    return f"{change:+.0f}% {'↑' if change > 0 else '↓'}"


# ----------------------------------------------------------------------------- tables


def row_keys(*summaries: pd.DataFrame) -> list[str]:
    """Columns identifying a table row: model and method, plus BC when a method has several,
    plus the batch size when a method was run at several."""
    keys = ROW_KEY[:2]
    for extra in ROW_KEY[2:]:
        for summary in summaries:
            overall = summary[summary["category"] == OVERALL]
            if extra in overall and overall.groupby(["model", "method_label"])[extra].nunique().gt(1).any():
                keys = keys + [extra]
                break
    return keys


def batched(summary: pd.DataFrame) -> bool:
    """Whether any of the summary's rows were decoded at a batch size above 1."""
    return "batch_size" in summary and bool((summary["batch_size"] > 1).any())


def wide_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method, BC): per-category speedup (+std) and the overall metrics."""
    overall = summary[summary["category"] == OVERALL].set_index(ROW_KEY)
    wide = overall[["mat", "tokens_per_s", "speedup", "speedup_std", "mbsu", "n_errors", "n_replicates",
                    "median_speedup", "ar_agreement", "lossless"]
                   + [c for c in ("alpha1", "alpha2", "alpha3") if c in overall.columns]]
    wide = wide.rename(columns={"speedup": "speedup_overall", "speedup_std": "speedup_std_overall"}).copy()
    wide["params"] = overall["method_params"].map(format_params)
    for category in categories_of(summary):
        cat = summary[summary["category"] == category].set_index(ROW_KEY)
        wide[f"speedup_{category}"] = cat["speedup"]
        wide[f"speedup_std_{category}"] = cat["speedup_std"]
    # AR is the baseline: its speedup is 1 by construction, a spread of 0 says nothing.
    is_ar = [is_baseline_label(m) for m in wide.index.get_level_values("method_label")]  # an engine's own AR too
    wide.loc[is_ar, [c for c in wide.columns if c.startswith("speedup_std_")]] = float("nan")
    order = {key: i for i, key in enumerate(overall.index)}
    wide = wide.reset_index()
    return wide.iloc[sorted(range(len(wide)), key=lambda i: order[tuple(wide.loc[i, ROW_KEY])])]


def categories_of(summary: pd.DataFrame) -> list[str]:
    """The categories present (without `overall`), in table order."""
    return [c for c in order_categories(summary["category"].unique()) if c != OVERALL]


def spec_bench_table(summary: pd.DataFrame, columns: Iterable[str] = (), quality: pd.DataFrame | None = None) -> TableData:
    """The Spec-Bench table (see module docstring) from a `summarize` frame; with a
    `quality.quality_summary` frame, one quality column per scorer after Overall. Lossy
    methods' labels get " (lossy)"."""
    columns = validate_columns(columns)
    if summary.empty:
        raise ValueError("no rows to tabulate")
    frame = wide_frame(summary)
    keys = row_keys(summary)
    cols = []
    if frame["model"].nunique() > 1:
        cols.append(Column("Model", "model", numeric=False))
    cols.append(Column("Method", "method_label", numeric=False))
    # NAME@auto / NAME@N instances: the BC column shows each one's (chosen) budget
    if "bc" in columns or "block_complexity" in keys or frame["method_label"].astype(str).str.contains("@").any():
        cols.append(Column("BC", "block_complexity", digits=0))
    if "batch_size" in keys or batched(summary):  # AR at the same N is each row's baseline
        cols.append(Column("N", "batch_size", digits=0))
    if "params" in columns:
        cols.append(Column("Params", "params", numeric=False))
    cols += [Column(display_category(c), f"speedup_{c}", f"speedup_std_{c}") for c in categories_of(summary)]
    cols.append(Column("#MAT", "mat"))
    if "mbsu" in columns:
        cols.append(Column("MBSU", "mbsu"))
    if "alpha" in columns:  # chain drafters only (KOALA measures n-alpha with chains); others show "–"
        cols += [Column(f"{n}-α", f"alpha{n}") for n in (1, 2, 3) if f"alpha{n}" in frame.columns]
    cols += [Column("Tok/s", "tokens_per_s", digits=1), Column("Overall", "speedup_overall", "speedup_std_overall")]
    notes = table_notes(summary)
    if quality is not None and len(quality):
        frame = add_quality_columns(frame, cols, notes, quality)
    frame["method_label"] = [f"{m} (lossy)" if lossless is False else m
                             for m, lossless in zip(frame["method_label"], frame["lossless"])]
    if "median" in columns:
        cols.append(Column("Median", "median_speedup"))
    if "agree" in columns:
        cols.append(Column("=AR", "ar_agreement"))
    return TableData(table_title(summary), cols, frame.reset_index(drop=True), notes)


ACCEPTANCE_TITLE = "Acceptance per draft position"
ACCEPTANCE_NOTES = [
    "AL with bonus: tokens a decoding step adds, the target's own (bonus) token included (= #MAT; Spec-Bench, "
    "EAGLE's tau, Medusa, vLLM); AL without bonus: accepted draft tokens per step (AL with bonus - 1). "
    "p_k: P(draft position k accepted | positions 1..k-1 accepted, and the draft offered position k on that path), "
    "pooled over steps (docs/metrics.md).",
]


def acceptance_table(summary: pd.DataFrame, max_k: int | None = None) -> TableData | None:
    """Acceptance per drafting method (overall): AL with and without the bonus token, then the
    conditional acceptance rate p_k of each draft position k (up to `max_k`); None without a
    drafting method."""
    drafting = pd.Series([not is_baseline_label(m) for m in summary["method_label"]], index=summary.index, dtype=bool)
    overall = summary[(summary["category"] == OVERALL) & drafting]  # neither ar nor an engine's ENGINE:ar
    if overall.empty or "conditional_acceptance" not in overall:
        return None
    frame = overall.reset_index(drop=True).copy()
    rates = [r if isinstance(r, dict) else {} for r in frame["conditional_acceptance"]]
    top = max((max(r) for r in rates if r), default=0)
    top = min(top, max_k) if max_k else top
    for k in range(1, top + 1):
        frame[f"p{k}"] = [r.get(k, float("nan")) for r in rates]
    keys = row_keys(summary)
    cols = ([Column("Model", "model", numeric=False)] if frame["model"].nunique() > 1 else [])
    cols.append(Column("Method", "method_label", numeric=False))
    if "block_complexity" in keys:
        cols.append(Column("BC", "block_complexity", digits=0))
    cols += [Column("AL with bonus", "mat"), Column("AL without bonus", "al_no_bonus")]
    cols += [Column(f"p{k}", f"p{k}") for k in range(1, top + 1)]
    notes = list(ACCEPTANCE_NOTES)
    missing = [label for label, r in zip(frame["method_label"], rates) if not r]
    if missing:
        notes.append(f"no p_k for {', '.join(map(str, missing))}: a tree drafter's rows from before draft paths "
                     f"were recorded, or no step drafted anything")
    return TableData(ACCEPTANCE_TITLE, cols, frame, notes)


DIFFICULTY_ORDER = ("easy", "medium", "hard")


def difficulty_table(rows, columns: Iterable[str] = DEFAULT_COLUMNS) -> TableData | None:
    """The speedup table with the questions' difficulty (SPEED-Bench) in place of categories;
    None when no row carries a difficulty."""
    frame = metrics.to_frame(rows)
    if frame.empty or frame["difficulty"].isna().all():
        return None
    graded = frame[frame["difficulty"].notna()].copy()
    graded["category"] = graded["difficulty"].astype(str)
    table = spec_bench_table(metrics.summarize(graded), columns)
    levels = [c.key[len("speedup_"):] for c in table.columns if c.key.startswith("speedup_") and c.key != "speedup_overall"]
    rank = {name: i for i, name in enumerate(DIFFICULTY_ORDER)}
    ordered = sorted(levels, key=lambda v: (rank.get(v.lower(), len(rank)), _number_or_inf(v), v))
    by_level = {c.key: c for c in table.columns}
    it = iter(by_level[f"speedup_{level}"] for level in ordered)
    table.columns = [next(it) if c.key in {f"speedup_{level}" for level in levels} else c for c in table.columns]
    table.title = table.title.replace("Speedup over AR", "Speedup over AR by difficulty", 1)
    return table


def _number_or_inf(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("inf")


def validate_columns(columns: Iterable[str]) -> set[str]:
    """Lower-cased optional column names; ValueError on an unknown one."""
    chosen = {c.strip().lower() for c in columns if c.strip()}
    unknown = chosen - set(OPTIONAL_COLUMNS)
    if unknown:
        raise ValueError(f"unknown column(s) {', '.join(sorted(unknown))}; choose from {', '.join(OPTIONAL_COLUMNS)}")
    return chosen


def table_title(summary: pd.DataFrame) -> str:
    """'Speedup over AR — <model(s)>, block complexity <bc(s)>'."""
    models = ", ".join(dict.fromkeys(summary["model"].astype(str)))
    bcs = ", ".join(str(b) for b in sorted(summary["block_complexity"].unique()))
    sizes = ", ".join(str(n) for n in sorted(summary["batch_size"].unique())) if batched(summary) else ""
    return f"Speedup over AR — {models}, block complexity {bcs}" + (f", batch size {sizes}" if sizes else "")


def table_notes(summary: pd.DataFrame) -> list[str]:
    """Caveats a reader must see: errors, AR mismatches, missing baselines, replicates."""
    notes = []
    overall = summary[summary["category"] == OVERALL]
    replicates = sorted(set(overall["n_replicates"]) - {0})
    if replicates and max(replicates) > 1:
        notes.append(f"Values are mean ± sample std over {'/'.join(map(str, replicates))} replicates (run, repeat).")
    for _, row in overall.iterrows():
        n = row.get("batch_size", 1)
        name = f"{row['method_label']} ({row['model']}, BC {row['block_complexity']}{f', N {n}' if n > 1 else ''})"
        if row["n_errors"]:
            notes.append(f"{name}: {row['n_errors']} of {row['n_rows']} rows errored and are left out.")
        if is_baseline_label(row["method_label"]) and row["ar_compared"]:  # an engine's AR against specbench's
            notes.append(f"{name}: {row['ar_compared'] - row['ar_mismatches']} of {row['ar_compared']} outputs equal "
                         f"{AR_METHOD}'s (another engine's arithmetic: information, not a losslessness check).")
        elif row["ar_mismatches"]:
            claim = (" although it claims to be lossless" if row["lossless"]
                     else " (lossy by design: not part of the losslessness check)")
            notes.append(f"{name}: {row['ar_mismatches']} of {row['ar_compared']} outputs differ from AR{claim}.")
        if not is_baseline_label(row["method_label"]) and row["n_paired"] == 0:
            baseline = baseline_of(plain_label(row["method_label"])) + label_suffix(row["method_label"])
            notes.append(f"{name}: no {baseline} rows for the same questions; speedup not "
                         f"available.")
        elif row["n_paired"] < row["n_questions"]:
            notes.append(f"{name}: speedup over {row['n_paired']} of {row['n_questions']} questions (those AR also has).")
    return notes


def comparison_table(summary_a: pd.DataFrame, summary_b: pd.DataFrame, metric: str = "speedup") -> TableData:
    """Run A vs run B per (model, method) and category: 'a → b (+34% ↑)' for `metric`."""
    keys = row_keys(summary_a, summary_b)
    merged = summary_a.merge(summary_b, on=keys + ["category"], suffixes=("_a", "_b"))
    if metric == "speedup":  # AR's speedup is 1 by definition
        merged = merged[~merged["method_label"].map(is_ar_label)]
    if merged.empty:
        raise ValueError("the two runs share no (model, method, category)")
    categories = categories_of(merged) + [OVERALL]
    rows = []
    for key, group in merged.groupby(keys, sort=False):
        by_cat = group.set_index("category")
        row = dict(zip(keys, key))
        if (group["lossless_a"] == False).any():  # noqa: E712 (None = unknown, not lossy)
            row["method_label"] += " (lossy)"
        for category in categories:
            if category in by_cat.index:
                a, b = float(by_cat.at[category, f"{metric}_a"]), float(by_cat.at[category, f"{metric}_b"])
                row[category] = f"{format_value(a)} → {format_value(b)} ({relative_change(a, b)})"
        rows.append(row)
    shown = [k for k in keys if k != "model" or merged["model"].nunique() > 1]
    headers = {"model": "Model", "method_label": "Method", "block_complexity": "BC", "batch_size": "N"}
    cols = [Column(headers[k], k, numeric=False) for k in shown]
    cols += [Column(display_category(c), c, numeric=False) for c in categories]
    label = {"speedup": "Speedup", "mat": "#MAT", "tokens_per_s": "Tok/s"}.get(metric, metric)
    return TableData(f"{label}: run A → run B", cols, pd.DataFrame(rows), [])


SHORT_HEADERS = {"MT-bench": "MT", "Translation": "Trans.", "Summarization": "Sum.", "Tok/s": "tok/s"}
# Columns a narrow terminal may hide, least important first; category columns go next (right to
# left). Model, Method, #MAT, Overall and =AR (the losslessness check) are never hidden.
DROP_FIRST = ("Median", "Params", "MBSU", "Tok/s", "BC")
NEVER_DROP = ("Model", "Method", "#MAT", "Overall", "=AR")
METHOD_WRAP = 14  # a long method label wraps onto a second line before any column is hidden


def wrap_cell(text: str) -> str:
    """Break '2.31 ± 0.04' and '1.07 → 1.21 (+13% ↑)' into short lines for narrow terminals."""
    return text.replace(" ± ", "\n±").replace(" → ", "\n→ ").replace(" (", "\n(")


def _build_grid(table: TableData, columns: list[Column], rows: list[list[str]], compact: bool) -> Table:
    """A rich Table of `columns` only; `compact` = short headers, one-space gaps, wrapped labels."""
    index = [table.columns.index(c) for c in columns]
    grid = Table(title=escape(printable(table.title)), title_style="bold", header_style="bold cyan",
                 box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False, padding=(0, 0) if compact else (0, 1))
    for col, i in zip(columns, index):
        cell_width = max([len(line) for r in rows for line in r[i].split("\n")] or [1])
        header = SHORT_HEADERS.get(col.header, col.header) if compact else col.header
        if col.numeric:
            grid.add_column(escape(printable(header)), justify="right", overflow="fold", min_width=cell_width)
        else:
            grid.add_column(escape(printable(header)), justify="left", overflow="fold", min_width=min(cell_width, 10),
                            max_width=METHOD_WRAP if compact else None)
    for (_, row), cells in zip(table.frame.iterrows(), rows):
        shown = [_break_label(cells[i]) if compact and not table.columns[i].numeric else cells[i] for i in index]
        grid.add_row(*shown, style="dim" if is_ar_label(row.get("method_label")) else None)
    return grid


def _break_label(text: str) -> str:
    """'mask-probe(mean,m=2)' -> 'mask-probe' over '(mean,m=2)' when it is longer than METHOD_WRAP."""
    if len(text) <= METHOD_WRAP or "(" not in text[1:]:
        return text
    head, tail = text.split("(", 1)
    return f"{head}\n({tail}"


def _natural_width(grid: Table) -> int:
    """Width the table takes when nothing forces it narrower."""
    from rich.console import Console
    from rich.measure import Measurement

    probe = Console(width=10_000, file=io.StringIO())
    return Measurement.get(probe, probe.options, grid).maximum


def _drop_order(columns: list[Column]) -> list[Column]:
    """Columns a narrow terminal may hide, in the order they go."""
    by_header = {c.header: c for c in columns}
    first = [by_header[h] for h in DROP_FIRST if h in by_header]
    categories = [c for c in columns if c.key.startswith("speedup_") and c.header not in NEVER_DROP]
    return first + categories[::-1]


def fit_table(table: TableData, width: int | None = None) -> tuple[Table, list[str]]:
    """The table as a rich Table that fits `width` columns, and the headers hidden to get there.

    Numbers right-aligned, '± std' or '(+x%)' on a second line, AR dimmed. When the full table is
    wider than `width`: short headers, one-space gaps and wrapped method labels first; then the
    least important columns are hidden (`DROP_FIRST`, then categories right to left). Method,
    #MAT, Overall and =AR always stay.
    """
    rows = [[wrap_cell(escape(c)) for c in cells] for cells in table.cells()]
    columns = list(table.columns)
    grid = _build_grid(table, columns, rows, compact=False)
    if width is None or _natural_width(grid) <= width:
        return grid, []
    grid = _build_grid(table, columns, rows, compact=True)
    dropped: list[str] = []
    for victim in _drop_order(columns):
        if _natural_width(grid) <= width:
            break
        columns.remove(victim)
        dropped.append(victim.header)
        grid = _build_grid(table, columns, rows, compact=True)
    return grid, dropped


def print_table(table: TableData) -> None:
    """Print the table and its notes to stdout (`console.out`), fitted to the terminal's width."""
    grid, dropped = fit_table(table, out.width)
    out.print(grid)
    if dropped:
        out.print(f"[dim]hidden to fit {out.width} columns: {escape(printable(', '.join(dropped)))} "
                  f"(widen the terminal, or see the report files)[/dim]", highlight=False)
    for note in table.notes:
        out.print(f"[yellow]note:[/] {escape(printable(note))}", highlight=False)


def add_quality_columns(frame, cols: list, notes: list[str], quality):
    """Merge one score column per scorer into a report's wide `frame` (appending its Column to
    `cols` and its notes to `notes`); returns the new frame."""
    from specbench_cli.scoring.quality import METRIC_NAMES, quality_notes

    for scorer, group in quality.groupby("scorer", sort=False):
        frame = frame.merge(group[ROW_KEY + ["score"]].rename(columns={"score": f"quality_{scorer}"}),
                            on=ROW_KEY, how="left")
        cols.append(Column(METRIC_NAMES.get(scorer, scorer), f"quality_{scorer}"))
    notes += quality_notes(quality)
    return frame
