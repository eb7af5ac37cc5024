"""Paper-style figures (PNG and PDF) from rows and `metrics.summarize` output.

- speedup per category per method (grouped bars, AR = 1 line, error bars over replicates);
- #MAT against block complexity per method (one line per method, across runs);
- distribution of accepted lengths per method;
- per-position acceptance (k-alpha) of chain drafters;
- conditional acceptance per draft position of every drafting method (docs/metrics.md);
- where the decode time goes: ms per step stacked by part, per method (report/timing.py);
- #MAT against the sampling temperature, when the rows hold several.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator, PercentFormatter  # noqa: E402

from specbench_cli.atomic import atomic_write  # noqa: E402
from specbench_cli.report import metrics, timing  # noqa: E402
from specbench_cli.report.metrics import AR_METHOD, OVERALL  # noqa: E402
from specbench_cli.report.table import printable  # noqa: E402
from specbench_cli.tasks.categories import display_category  # noqa: E402

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.alpha": 0.3,
    "pdf.fonttype": 42,  # embed TrueType so PDFs are editable and accepted by publishers
}
COLORS = plt.get_cmap("tab10").colors
# Figures are rebuilt from result files alone, so the same files give the same bytes: no creation
# date in a PDF or an SVG, and an SVG's clip-path ids from a fixed salt instead of a random one.
NO_DATE = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": {}}
SVG_SALT = "specbench"


def save_figure(fig: plt.Figure, directory: Path, stem: str) -> list[Path]:
    """Write `stem.png` and `stem.pdf` into `directory`; close the figure."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{stem}.png", directory / f"{stem}.pdf"]
    with plt.rc_context(STYLE):  # savefig.dpi
        for path in paths:
            kind = Path(path).suffix[1:]
            atomic_write(path, lambda tmp: fig.savefig(tmp, bbox_inches="tight", format=kind, metadata=NO_DATE[kind]))
    plt.close(fig)
    return paths


# the most characters of a label a figure shows (a longer one would widen the figure past what
# a PNG can hold: 5000 characters made it 76,000 pixels wide)
PLOT_LABEL_CHARS = 60


def plot_text(text: object) -> str:
    """Text from a run folder (a method label, model, category) as a figure shows it, literally:
    one `printable` line of at most PLOT_LABEL_CHARS characters, each `$` escaped so matplotlib
    never parses it as mathtext (`pld $x^$` ended `report` with a parser error), and a leading
    `_` kept from hiding the series (matplotlib leaves such labels out of legends)."""
    text = printable(text, PLOT_LABEL_CHARS).replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def series_label(model: str, method_label: str, block_complexity: int, with_model: bool, with_bc: bool) -> str:
    """Legend text of one series: method, plus model and BC when they vary (`plot_text`)."""
    label = f"{plot_text(model)} · {plot_text(method_label)}" if with_model else plot_text(method_label)
    return f"{label} (BC {block_complexity})" if with_bc else label


def _label_flags(frame: pd.DataFrame) -> tuple[bool, bool]:
    """Whether legends must name the model and/or BC to tell series apart."""
    with_model = frame["model"].nunique() > 1
    with_bc = bool(frame.groupby(["model", "method_label"])["block_complexity"].nunique().gt(1).any())
    return with_model, with_bc


def _methods_only(summary: pd.DataFrame) -> pd.DataFrame:
    """Summary rows of drafting methods (AR is drawn as a reference line instead)."""
    return summary[~summary["method_label"].map(metrics.is_ar_label).astype(bool)]


def _legend(ax: plt.Axes) -> None:
    """A frameless legend to the right of the axes (never over the data or the title)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, borderaxespad=0)


def method_palette(keys: Sequence[tuple]) -> dict[tuple, tuple]:
    """A fixed colour per (model, method_label), so every figure colours a method alike."""
    methods = sorted(dict.fromkeys((str(k[0]), str(k[1])) for k in keys))
    return {m: COLORS[i % len(COLORS)] for i, m in enumerate(methods)}


def series_colors(keys: Sequence[tuple], palette: dict[tuple, tuple] | None = None) -> list[tuple]:
    """One hue per (model, method); BC variants of a method get lighter shades (largest BC darkest).

    `keys` are (model, method_label, block_complexity) tuples; `palette` maps (model, method)
    to a base colour (default: `method_palette(keys)`).
    """
    palette = palette or method_palette(keys)
    methods = list(dict.fromkeys(k[:2] for k in keys))
    bcs = {m: sorted({k[2] for k in keys if k[:2] == m}) for m in methods}
    colors = []
    for key in keys:
        base = np.array(matplotlib.colors.to_rgb(palette[(str(key[0]), str(key[1]))]))
        levels = bcs[key[:2]]
        lighten = 0.6 * (1 - levels.index(key[2]) / (len(levels) - 1)) if len(levels) > 1 else 0.0
        colors.append(tuple(base + (1 - base) * lighten))
    return colors


def _sorted_series(items: Sequence[tuple[tuple, object]]) -> list[tuple[tuple, object]]:
    """Series ordered by model, method label, then block complexity."""
    return sorted(items, key=lambda item: (str(item[0][0]), str(item[0][1]), item[0][2]))


def plot_speedup_by_category(summary: pd.DataFrame, directory: Path, stem: str = "speedup_by_category",
                             palette: dict | None = None) -> list[Path]:
    """Grouped bars: Spec-Bench speedup per category (and overall) for every method."""
    return save_figure(draw_speedup_by_category(summary, palette), directory, stem)


def draw_speedup_by_category(summary: pd.DataFrame, palette: dict | None = None) -> plt.Figure:
    """The figure of `plot_speedup_by_category`."""
    data = _methods_only(summary)
    categories = metrics.order_categories(data["category"].unique())
    with_model, with_bc = _label_flags(summary)
    series = _sorted_series(list(data.groupby(["model", "method_label", "block_complexity"], sort=False)))
    colors = series_colors([key for key, _ in series], palette)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(max(7.0, 1.35 * len(categories) + 0.25 * len(series)), 3.8))
        width = 0.8 / max(len(series), 1)
        x = np.arange(len(categories))
        for i, ((model, label, bc), group) in enumerate(series):
            by_cat = group.set_index("category").reindex(categories)
            ax.bar(x + (i - (len(series) - 1) / 2) * width, by_cat["speedup"], width * 0.92,
                   yerr=by_cat["speedup_std"].fillna(0), capsize=2, color=colors[i],
                   label=series_label(model, label, bc, with_model, with_bc), error_kw={"elinewidth": 0.8})
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, label="AR (1.00×)")
        ax.set_xticks(x, [plot_text(display_category(c)) for c in categories])
        if OVERALL in categories:
            ax.axvline(len(categories) - 1.5, color="0.7", linewidth=0.8)
        ax.set_ylabel("Speedup over AR (×)")
        ax.set_ylim(0, max(1.2, float(np.nanmax(data["speedup"].to_numpy(dtype=float), initial=1.0)) * 1.15))
        ax.set_title("Spec-Bench speedup per category")
        _legend(ax)
        return fig


def plot_mat_vs_block_complexity(summary: pd.DataFrame, directory: Path, stem: str = "mat_vs_block_complexity",
                                 palette: dict | None = None) -> list[Path]:
    """Lines: overall #MAT of each method against block complexity (across runs)."""
    return save_figure(draw_mat_vs_block_complexity(summary, palette), directory, stem)


def draw_mat_vs_block_complexity(summary: pd.DataFrame, palette: dict | None = None) -> plt.Figure:
    """The figure of `plot_mat_vs_block_complexity`."""
    data = _methods_only(summary[summary["category"] == OVERALL]).sort_values("block_complexity")
    with_model = data["model"].nunique() > 1
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        groups = sorted(data.groupby(["model", "method_label"], sort=False), key=lambda g: (str(g[0][0]), str(g[0][1])))
        palette = palette or method_palette([key for key, _ in groups])
        for (model, label), group in groups:
            ax.plot(group["block_complexity"], group["mat"], marker="o", color=palette[(str(model), str(label))],
                    label=series_label(model, label, 0, with_model, False))
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, label="AR (1 token / forward)")
        bcs = sorted(data["block_complexity"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(bcs, [str(b) for b in bcs])
        ax.minorticks_off()
        ax.set_xlabel("Block complexity (max tokens per target forward)")
        ax.set_ylabel("#MAT (tokens per target forward)")
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title("Mean accepted tokens vs. block complexity")
        _legend(ax)
        return fig


def plot_accept_length_distribution(rows: Sequence[dict] | pd.DataFrame, directory: Path,
                                    stem: str = "accept_length_distribution", palette: dict | None = None) -> list[Path]:
    """Grouped bars: share of decoding steps that added 1, 2, 3, ... tokens, per method."""
    return save_figure(draw_accept_length_distribution(rows, palette), directory, stem)


def draw_accept_length_distribution(rows: Sequence[dict] | pd.DataFrame, palette: dict | None = None) -> plt.Figure:
    """The figure of `plot_accept_length_distribution`."""
    frame = metrics.to_frame(rows)
    frame = frame[frame["method"] != AR_METHOD]
    dists = dict(_sorted_series(list(metrics.distribution_by_method(
        frame, by=("model", "method_label", "block_complexity")).items())))
    colors = series_colors(list(dists), palette)
    with_model, with_bc = _label_flags(frame)
    lengths = np.arange(1, max((max(d) for d in dists.values() if d), default=1) + 1)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(max(5.5, 0.35 * len(lengths) * max(len(dists), 1) ** 0.5 + 2.5), 3.8))
        width = 0.8 / max(len(dists), 1)
        for i, ((model, label, bc), counts) in enumerate(dists.items()):
            total = sum(counts.values())
            shares = [counts.get(int(n), 0) / total for n in lengths]
            ax.bar(lengths + (i - (len(dists) - 1) / 2) * width, shares, width * 0.92, color=colors[i],
                   label=series_label(model, label, bc, with_model, with_bc))
        ax.set_xticks(lengths)
        ax.set_xlabel("Tokens added per decoding step (accepted drafts + 1)")
        ax.set_ylabel("Share of decoding steps")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_title("Distribution of accepted lengths")
        _legend(ax)
        return fig


def plot_position_acceptance(rows: Sequence[dict] | pd.DataFrame, directory: Path,
                             stem: str = "position_acceptance", palette: dict | None = None) -> list[Path]:
    """Lines: k-alpha (share of steps proposing >= k drafts that accept >= k) for chain drafters."""
    return save_figure(draw_position_acceptance(rows, palette), directory, stem)


def draw_position_acceptance(rows: Sequence[dict] | pd.DataFrame, palette: dict | None = None) -> plt.Figure:
    """The figure of `plot_position_acceptance`."""
    frame = metrics.to_frame(rows)
    curves = dict(_sorted_series(list(metrics.position_acceptance_by_method(
        frame, by=("model", "method_label", "block_complexity")).items())))
    colors = series_colors(list(curves), palette)
    with_model, with_bc = _label_flags(frame)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for i, ((model, label, bc), rates) in enumerate(curves.items()):
            ax.plot(list(rates), list(rates.values()), marker="o", color=colors[i],
                    label=series_label(model, label, bc, with_model, with_bc))
        # Long tails of zeros (a 59-token Jacobi window) squash the informative first positions.
        informative = [k for rates in curves.values() for k, v in rates.items() if v > 0]
        if informative:
            ax.set_xlim(0.5, max(informative) + 1.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("Draft position k")
        ax.set_ylabel("k-α: P(accept ≥ k | ≥ k drafted)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_ylim(0, 1.02)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title("Per-position acceptance (chain drafters)")
        _legend(ax)
        return fig


def draw_conditional_acceptance(summary: pd.DataFrame, palette: dict | None = None) -> plt.Figure:
    """Lines: P(draft position k accepted | 1..k-1 accepted) per drafting method (overall)."""
    data = _methods_only(summary[summary["category"] == OVERALL])
    series = _sorted_series([((model, label, bc), rates) for model, label, bc, rates in
                             data[["model", "method_label", "block_complexity", "conditional_acceptance"]]
                             .itertuples(index=False, name=None) if isinstance(rates, dict) and rates])
    colors = series_colors([key for key, _ in series], palette)
    with_model, with_bc = _label_flags(summary)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for i, ((model, label, bc), rates) in enumerate(series):
            ax.plot(list(rates), list(rates.values()), marker="o", color=colors[i],
                    label=series_label(model, label, bc, with_model, with_bc))
        informative = [k for _, rates in series for k, v in rates.items() if v > 0]
        if informative:
            ax.set_xlim(0.5, max(informative) + 1.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("Draft position k")
        ax.set_ylabel("P(k accepted | 1..k-1 accepted)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_ylim(0, 1.02)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title("Conditional acceptance per draft position")
        _legend(ax)
        return fig


def _has_conditional(summary: pd.DataFrame) -> bool:
    data = _methods_only(summary[summary["category"] == OVERALL])
    return "conditional_acceptance" in data and any(isinstance(r, dict) and r for r in data["conditional_acceptance"])


def figures(rows: Sequence[dict] | pd.DataFrame, summary: pd.DataFrame) -> Iterator[tuple[str, str, plt.Figure]]:
    """(stem, title, figure) of every figure the data supports, one at a time.

    Speedup bars need a method with a speedup; #MAT vs BC needs two block complexities;
    the distribution needs a drafting method; k-alpha needs a chain drafter. Runs at several
    batch sizes: these figures show the smallest one (report/batch.py draws speedup against N).
    """
    frame = metrics.to_frame(rows)
    if "batch_size" in summary and summary["batch_size"].nunique() > 1:
        smallest = summary["batch_size"].min()
        summary, frame = summary[summary["batch_size"] == smallest], frame[frame["batch_size"] == smallest]
    drafting = _methods_only(summary)
    palette = method_palette(list(drafting[["model", "method_label"]].itertuples(index=False, name=None)))
    if drafting["speedup"].notna().any():
        yield "speedup_by_category", "Speedup per category", draw_speedup_by_category(summary, palette)
    if drafting["block_complexity"].nunique() > 1:
        yield "mat_vs_block_complexity", "#MAT vs block complexity", draw_mat_vs_block_complexity(summary, palette)
    if (metrics.ok_rows(frame)["method"] != AR_METHOD).any():
        yield ("accept_length_distribution", "Distribution of accepted lengths",
               draw_accept_length_distribution(frame, palette))
    if metrics.position_acceptance_by_method(frame):
        yield "position_acceptance", "Per-position acceptance (chain drafters)", draw_position_acceptance(frame, palette)
    if _has_conditional(summary):
        yield ("conditional_acceptance", "Conditional acceptance per draft position",
               draw_conditional_acceptance(summary, palette))
    split = timing.breakdown(frame.to_dict("records"), summary)
    if len(split) and split["propose_share"].notna().any():
        yield "time_breakdown", "Where the decode time goes", draw_time_breakdown(split)
    temps = timing.temperature_frame(frame.to_dict("records"))
    if len(temps) and temps["temperature"].nunique() > 1:
        yield "mat_vs_temperature", "#MAT vs temperature", draw_mat_vs_temperature(temps, palette)


def draw_time_breakdown(split: pd.DataFrame) -> plt.Figure:
    """One stacked horizontal bar per method instance: ms per decoding step, split into propose,
    forward, accept, commit, observe and other (report/timing.py)."""
    data = split[split["propose_share"].notna()].reset_index(drop=True)
    with_model, with_bc = _label_flags(data)
    labels = [series_label(r.model, r.method_label, r.block_complexity, with_model, with_bc)
              for r in data.itertuples(index=False)]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(data) + 1.4))
    left = np.zeros(len(data))
    colours = plt.get_cmap("tab10").colors
    for i, part in enumerate(timing.SHOWN_PARTS):
        values = data[f"{part}_ms"].to_numpy(dtype=float)
        ax.barh(labels, values, left=left, color=colours[i % len(colours)], label=timing.PART_HEADERS[part])
        left += values
    ax.invert_yaxis()
    ax.set_xlabel("ms per decoding step")
    ax.grid(axis="x", alpha=0.3)
    ax.grid(axis="y", visible=False)
    ax.legend(ncol=3, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def draw_mat_vs_temperature(temps: pd.DataFrame, palette: dict | None = None) -> plt.Figure:
    """#MAT against the sampling temperature, one line per method instance."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    with_model, with_bc = _label_flags(temps)
    for key, group in temps.groupby(["model", "method_label", "block_complexity", "batch_size"], sort=False):
        group = group.sort_values("temperature")
        colour = (palette or {}).get((key[0], key[1]))
        ax.plot(group["temperature"], group["mat"], marker="o", color=colour,
                label=series_label(key[0], key[1], key[2], with_model, with_bc))
    ax.set_xlabel("temperature")
    ax.set_ylabel("#MAT")
    _legend(ax)
    fig.tight_layout()
    return fig


def write_plots(rows: Sequence[dict] | pd.DataFrame, summary: pd.DataFrame, directory: Path) -> list[Path]:
    """Every figure the data supports (`figures`) as PNG and PDF; returns the files written."""
    written: list[Path] = []
    for stem, _, fig in figures(rows, summary):
        written += save_figure(fig, directory, stem)
    return written


def svg_figures(rows: Sequence[dict] | pd.DataFrame, summary: pd.DataFrame) -> list[tuple[str, str]]:
    """(title, SVG text) of every figure the data supports, for a self-contained HTML page
    (glyphs as paths, so the page needs no font)."""
    out = []
    for _, title, fig in figures(rows, summary):
        buffer = io.StringIO()
        with plt.rc_context({**STYLE, "svg.fonttype": "path", "svg.hashsalt": SVG_SALT}):
            fig.savefig(buffer, format="svg", bbox_inches="tight", metadata=NO_DATE["svg"])
        plt.close(fig)
        text = buffer.getvalue()
        out.append((title, text[text.index("<svg"):]))  # drop the XML prolog and doctype
    return out
