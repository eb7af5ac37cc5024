"""Figures of a load run (PNG and PDF, or SVG for the HTML page), from report/load.py's point
summary; the same folder gives the same bytes (report/plots.py's `save_figure`: no dates, a
fixed SVG salt).

- speedup against concurrency, and against request rate, one line per method (and BC), the
  bootstrap interval as error bars, 1.0 dashed, the crossover marked;
- latency against throughput (p50 latency over output tok/s) with speculation on and off, one
  curve per method through its load levels, the Pareto-optimal points ringed;
- TTFT and TPOT percentiles (p50 and p99) per load point;
- the histogram of per-request acceptance length of each speculative method.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from specbench_cli.report import load as metrics  # noqa: E402
from specbench_cli.report.plots import COLORS, NO_DATE, STYLE, SVG_SALT, _legend, plot_text, save_figure  # noqa: E402


def _series_name(method: str, bc: object) -> str:
    key = metrics._bc_key(bc)
    return plot_text(method) + (f" (BC {key})" if key else "")


def _palette(summary: pd.DataFrame) -> dict[str, tuple]:
    methods = sorted(dict.fromkeys(str(m) for m in summary["method"]))
    return {m: COLORS[i % len(COLORS)] for i, m in enumerate(methods)}


def draw_speedup(summary: pd.DataFrame, mode: str, found: list[metrics.Crossover]) -> plt.Figure:
    """Speedup against the levels of one axis, with the interval and the crossover marked."""
    data = summary[summary["speculative"].astype(bool) & (summary["mode"] == mode)]
    palette = _palette(summary)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 3.8))
        groups = sorted(data.groupby(["method", data["bc"].map(metrics._bc_key)], sort=False),
                        key=lambda g: (str(g[0][0]), g[0][1]))
        for (method, bc), group in groups:
            group = group.sort_values("level")
            y = group["speedup"].to_numpy(dtype=float)
            low = y - group["speedup_low"].to_numpy(dtype=float)
            high = group["speedup_high"].to_numpy(dtype=float) - y
            ax.errorbar(group["level"], y, yerr=np.nan_to_num(np.vstack([low, high])), marker="o", capsize=3,
                        color=palette[str(method)], label=_series_name(method, group["bc"].iloc[0]),
                        linestyle="-" if not bc else "--")
        for cross in found:
            if cross.mode == mode and cross.level is not None:
                at = data[(data["method"] == cross.method) & (data["point"] == cross.at)]
                if len(at):
                    ax.plot([cross.level], [float(at["speedup"].iloc[0])], marker="X", markersize=11,
                            color="black", linestyle="none", zorder=5)
                    ax.axvline(cross.level, color=palette[str(cross.method)], linestyle=":", linewidth=1)
        ax.plot([], [], marker="X", color="black", linestyle="none", label="stops paying")
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, label="no speculation (1.00×)")
        levels = sorted(data["level"].unique())
        if mode == "concurrency":
            ax.set_xscale("log", base=2)
            ax.set_xticks(levels, [f"{v:g}" for v in levels])
            ax.minorticks_off()
            ax.set_xlabel("Concurrency (requests in flight)")
        else:
            ax.set_xticks(levels, [f"{v:g}" for v in levels])
            ax.set_xlabel("Request rate (requests/s)")
        ax.set_ylabel("Speedup over no speculation (×)")
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title(f"Speedup against {'concurrency' if mode == 'concurrency' else 'request rate'}")
        _legend(ax)
        return fig


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the Pareto-optimal points (throughput x higher is better, latency y lower): no
    other point has at least the throughput and at most the latency, one of them strictly."""
    best = []
    for i, (x, y) in enumerate(points):
        dominated = any((x2 >= x and y2 <= y) and (x2 > x or y2 < y) for j, (x2, y2) in enumerate(points) if j != i)
        if not dominated:
            best.append(i)
    return best


def draw_latency_throughput(summary: pd.DataFrame) -> plt.Figure:
    """p50 latency against output tok/s per point, one curve per (method, axis); baselines drawn
    as the speculation-off curves; the Pareto-optimal points of each target ringed."""
    data = summary[np.isfinite(summary["output_tok_s"].to_numpy(dtype=float))
                   & np.isfinite(summary["latency_p50"].to_numpy(dtype=float))]
    palette = _palette(summary)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 3.8))
        groups = sorted(data.groupby(["method", "mode", data["bc"].map(metrics._bc_key)], sort=False),
                        key=lambda g: (str(g[0][0]), g[0][1], g[0][2]))
        for (method, mode, bc), group in groups:
            group = group.sort_values("level")
            off = not bool(group["speculative"].iloc[0])
            label = _series_name(method, group["bc"].iloc[0]) + (" (off)" if off else "") + \
                (" · rate" if mode == "rate" else "")
            ax.plot(group["output_tok_s"], group["latency_p50"], marker="s" if off else "o",
                    linestyle="--" if off else "-", color=palette[str(method)], label=label)
        for _, target in data.groupby("target", sort=True):
            xy = list(zip(target["output_tok_s"].astype(float), target["latency_p50"].astype(float)))
            front = pareto(xy)
            ax.scatter([xy[i][0] for i in front], [xy[i][1] for i in front], s=140, facecolors="none",
                       edgecolors="black", linewidths=1.0, zorder=4)
        ax.scatter([], [], s=140, facecolors="none", edgecolors="black", label="Pareto-optimal")
        ax.set_xlabel("Output throughput (tok/s)")
        ax.set_ylabel("p50 latency (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title("Latency against throughput, speculation on and off")
        _legend(ax)
        return fig


def draw_percentiles(summary: pd.DataFrame) -> plt.Figure:
    """TTFT and TPOT, p50 (solid) and p99 (dashed), per load point, one colour per method."""
    palette = _palette(summary)
    names = list(dict.fromkeys(summary["point"]))
    order = {p: i for i, p in enumerate(names)}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 0.6 * len(names) + 6), 3.6))
        for ax, metric, title in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
            for method, group in sorted(summary.groupby("method", sort=False), key=lambda g: str(g[0])):
                x = [order[p] for p in group["point"]]
                for q, style in ((50, "-"), (99, "--")):
                    ax.plot(x, group[f"{metric}_p{q}"].to_numpy(dtype=float), marker="o", linestyle=style,
                            color=palette[str(method)], label=f"{plot_text(method)} p{q}")
            ax.set_xticks(range(len(names)), [plot_text(n) for n in names], rotation=45, ha="right")
            ax.set_ylabel(f"{title} (ms)")
            ax.set_ylim(bottom=0)
            ax.set_title(f"{title} percentiles")
        _legend(axes[1])
        fig.tight_layout()
        return fig


def draw_accept_histogram(requests: pd.DataFrame) -> plt.Figure:
    """Share of requests by their mean acceptance length (bins of 0.25), per speculative method."""
    data = requests[requests["ok"] & requests["baseline"].astype(bool) & requests["accept_length"].notna()]
    values = data["accept_length"].astype(float)
    top = max(2.0, float(np.ceil(values.max() * 4) / 4) + 0.25) if len(values) else 2.0
    bins = np.arange(1.0, top + 0.25, 0.25)
    palette = _palette(requests)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 3.8))
        for method, group in sorted(data.groupby("method", sort=False), key=lambda g: str(g[0])):
            v = group["accept_length"].astype(float).to_numpy()
            ax.hist(v, bins=bins, weights=np.full(len(v), 1 / len(v)), histtype="step", linewidth=1.6,
                    color=palette[str(method)], label=f"{plot_text(method)} ({len(v)} requests)")
        ax.set_xlabel("Mean tokens per verification step of a request (accepted drafts + 1)")
        ax.set_ylabel("Share of requests")
        ax.set_title("Per-request acceptance length")
        _legend(ax)
        return fig


def figures(summary: pd.DataFrame, run: metrics.LoadRun) -> Iterator[tuple[str, str, plt.Figure]]:
    """(stem, title, figure) of every figure the data supports."""
    spec = summary[summary["speculative"].astype(bool)]
    found = metrics.crossovers(summary)
    for mode, stem in (("concurrency", "speedup_vs_concurrency"), ("rate", "speedup_vs_rate")):
        if spec[spec["mode"] == mode]["speedup"].notna().any():
            yield stem, f"Speedup against {mode}", draw_speedup(summary, mode, found)
    if np.isfinite(summary["output_tok_s"].to_numpy(dtype=float)).any():
        yield "latency_throughput", "Latency against throughput", draw_latency_throughput(summary)
    if summary[["ttft_p50", "tpot_p50"]].notna().to_numpy().any():
        yield "ttft_tpot_percentiles", "TTFT and TPOT percentiles", draw_percentiles(summary)
    requests = metrics.request_frame(run)
    if (requests["ok"] & requests["baseline"].astype(bool) & requests["accept_length"].notna()).any():
        yield "accept_length_histogram", "Per-request acceptance length", draw_accept_histogram(requests)


def write_plots(summary: pd.DataFrame, run: metrics.LoadRun, directory: Path) -> list[Path]:
    written: list[Path] = []
    for stem, _, fig in figures(summary, run):
        written += save_figure(fig, directory, stem)
    return written


def svg_figures(summary: pd.DataFrame, run: metrics.LoadRun) -> list[tuple[str, str]]:
    out = []
    for _, title, fig in figures(summary, run):
        buffer = io.StringIO()
        with plt.rc_context({**STYLE, "svg.fonttype": "path", "svg.hashsalt": SVG_SALT}):
            fig.savefig(buffer, format="svg", bbox_inches="tight", metadata=NO_DATE["svg"])
        plt.close(fig)
        text = buffer.getvalue()
        out.append((title, text[text.index("<svg"):]))
    return out
