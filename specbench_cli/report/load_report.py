"""`specbench report DIR` on a load run: the load table (one row per target, method and load
point), acceptance per draft position, where speculation stops paying, the draft length per
concurrency (and the adaptive budget against it), written as load.<ext> through the report
formats, schedule.json, and the figures (report/load_plots.py); `--html` writes one page.

Numbers come from report/load.py; docs/load-report.md says what every column means.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import pandas as pd
from rich.markup import escape

from specbench_cli.atomic import atomic_write
from specbench_cli.console import err
from specbench_cli.errors import RuntimeFailure
from specbench_cli.report import formats as report_formats
from specbench_cli.report import load as metrics
from specbench_cli.report import render
from specbench_cli.report.table import Column, TableData, print_table
from specbench_cli.store.conditions import machine_line

FILE_STEM = "load"
SCHEDULE_FILE = "schedule.json"
LOAD_TITLE = "Speculation under load"
ACCEPTANCE_TITLE = "Acceptance per draft position under load"
CROSSOVER_TITLE = "Where speculation stops paying"
SCHEDULE_TITLE = "Draft length per concurrency"
ADAPTIVE_TITLE = "Adaptive budget against the schedule"


def _pct(name: str, key: str, digits: int = 1) -> list[Column]:
    return [Column(f"{name} p{q}", f"{key}_p{q}", digits=digits) for q in metrics.PERCENTILES]


def load_table(summary: pd.DataFrame, run: metrics.LoadRun) -> TableData:
    """One row per (target, method, point): requests, throughput, goodput, percentiles, acceptance,
    losslessness and the two paired speedups with their bootstrap intervals."""
    frame = summary.copy()
    frame["bc_text"] = [metrics._bc_key(b) for b in frame["bc"]]
    cols = [Column("Target", "target", numeric=False)] if frame["target"].nunique() > 1 else []
    cols += [Column("Method", "method", numeric=False), Column("Point", "point", numeric=False)]
    cols += [Column("Done", "completed", digits=0), Column("Errors", "errors", digits=0),
             Column("Tok/s", "output_tok_s", digits=1), Column("Req/s", "requests_s", digits=2)]
    if run.slo:
        cols.append(Column("Goodput", "goodput", digits=2))
    cols += _pct("TTFT ms", "ttft") + _pct("TPOT ms", "tpot") + _pct("ITL ms", "itl") + _pct("Latency ms", "latency", 0)
    cols += [Column("AL", "mean_accept_length"), Column("=Base", "lossless"),
             Column("Speedup", "speedup", interval=("speedup_low", "speedup_high")),
             Column("Latency speedup", "latency_speedup", interval=("latency_speedup_low", "latency_speedup_high"))]
    if (frame["streamed"].isin(["no", "part"])).any():
        cols.append(Column("Streamed", "streamed", numeric=False))
    model = run.manifest.get("model") if isinstance(run.manifest.get("model"), dict) else {}
    name = model.get("name") or model.get("ref") or (run.manifest.get("config") or {}).get("model")
    title = f"{LOAD_TITLE} — {name}" if isinstance(name, str) and name else f"{LOAD_TITLE} — {run.run_id}"
    return TableData(title, cols, frame.reset_index(drop=True), load_notes(summary, run))


SPEEDUP_NOTE = (f"Speedup: paired throughput ratio over the baseline at the same point and requests, (sum tokens / "
                f"sum latency) of the method over the same of its baseline; Latency speedup: geometric mean over "
                f"requests of baseline latency / method latency; [low, high]: {metrics.CONFIDENCE:.0%} bootstrap "
                f"interval over requests ({metrics.RESAMPLES} resamples, seed {metrics.SEED}). =Base: share of "
                f"requests whose tokens equal the baseline's. Times in ms (docs/load-report.md).")


def load_notes(summary: pd.DataFrame, run: metrics.LoadRun) -> list[str]:
    """What a reader must know: the SLO, the definitions, errors, unequal outputs, missing
    pairs, unfinished points, requests without a stream, the machine."""
    notes = [SPEEDUP_NOTE]
    slo = run.slo
    if slo:
        parts = ", ".join(f"{k[:-3].upper()} <= {v:g} ms" for k, v in slo.items())
        notes.append(f"Goodput: requests per second that met every SLO ({parts}), as `vllm bench serve --goodput`.")
    for row in summary.itertuples(index=False):
        name = f"{row.method} at {row.point}"
        if row.errors:
            notes.append(f"{name}: {row.errors} of {row.sent} requests errored and are left out of every metric "
                         f"but the count.")
        if row.speculative and row.compared and row.equal < row.compared:
            notes.append(f"{name}: {row.compared - row.equal} of {row.compared} outputs differ from {row.baseline}'s.")
        if row.speculative and row.n_paired == 0:
            notes.append(f"{name}: no ok {row.baseline or 'baseline'} request to pair with; speedup not available.")
        elif row.speculative and row.n_paired < row.completed:
            notes.append(f"{name}: speedup over the {row.n_paired} of {row.completed} requests {row.baseline} also "
                         f"completed.")
        if row.streamed in ("no", "part"):
            notes.append(f"{name}: {'some' if row.streamed == 'part' else 'no'} requests were streamed: those have "
                         f"TTFT = their whole latency, and no TPOT or ITL.")
        if not row.finished:
            notes.append(f"{name}: unfinished (no .done marker): {row.sent} request(s) recorded so far.")
    recorded = set(summary["point"])
    missing = [p.name for p in run.points() if p.name not in recorded]
    if missing:
        notes.append(f"not run yet: {', '.join(missing)}")
    machine = run.manifest.get("machine") if isinstance(run.manifest.get("machine"), dict) else {}
    host = machine.get("host") if isinstance(machine.get("host"), dict) else machine
    if host:
        notes.append(machine_line({"host": host, "config": run.manifest.get("config") or {},
                                   "model": run.manifest.get("model") or {}}))
    return notes


def acceptance_table(summary: pd.DataFrame) -> Optional[TableData]:
    """Per speculative (method, point) with acceptance data: AL, conditional p_k and marginal m_k."""
    has = [bool(c) or bool(m) for c, m in zip(summary["conditional_acceptance"], summary["marginal_acceptance"])]
    rows = summary[summary["speculative"].astype(bool) & pd.Series(has, index=summary.index, dtype=bool)]
    rows = rows.reset_index(drop=True).copy()
    if rows.empty:
        return None
    top = max(max([*c, *m], default=0) for c, m in zip(rows["conditional_acceptance"], rows["marginal_acceptance"]))
    for k in range(1, top + 1):
        rows[f"p{k}"] = [c.get(k, math.nan) for c in rows["conditional_acceptance"]]
        rows[f"m{k}"] = [m.get(k, math.nan) for m in rows["marginal_acceptance"]]
    cols = [Column("Target", "target", numeric=False)] if rows["target"].nunique() > 1 else []
    cols += [Column("Method", "method", numeric=False), Column("Point", "point", numeric=False),
             Column("AL", "mean_accept_length")]
    cols += [Column(f"p{k}", f"p{k}") for k in range(1, top + 1)]
    cols += [Column(f"m{k}", f"m{k}") for k in range(1, top + 1)]
    notes = ["AL: tokens per verification step (accepted drafts + 1), pooled over the point's requests. p_k: P(draft "
             "position k accepted | positions 1..k-1 accepted and position k drafted), as the main report's p_k; "
             "m_k: steps that accepted position k / all steps (marginal). Pooled over requests (docs/load-report.md)."]
    return TableData(ACCEPTANCE_TITLE, cols, rows, notes)


def crossover_table(found: list[metrics.Crossover]) -> Optional[TableData]:
    """One row per (target, method, BC, axis): the verdict of each level and where it stops paying."""
    if not found:
        return None
    rows = [{"target": c.target, "method": c.method, "bc": metrics._bc_key(c.bc),
             "axis": c.mode, "levels": ", ".join(f"{p} {v}" for p, v in zip(c.points, c.verdicts)),
             "crossover": c.at or "", "verdict": c.text} for c in found]
    frame = pd.DataFrame(rows)
    cols = [Column("Target", "target", numeric=False)] if frame["target"].nunique() > 1 else []
    cols.append(Column("Method", "method", numeric=False))
    if (frame["bc"] != "").any():
        cols.append(Column("BC", "bc", numeric=False))
    cols += [Column("Axis", "axis", numeric=False), Column("Levels", "levels", numeric=False),
             Column("Crossover", "crossover", numeric=False), Column("Where speculation stops paying", "verdict",
                                                                     numeric=False)]
    notes = ["Per level: pays (the speedup's interval lies wholly above 1), unclear (it holds 1), costs (wholly "
             "below 1). The crossover is the first level, going up, that does not pay after one that does."]
    return TableData(CROSSOVER_TITLE, cols, frame, notes)


def schedule_table(plan: dict) -> Optional[TableData]:
    """Per method and concurrency: the chosen BC, its objective and every candidate's."""
    rows = []
    for method, sched in plan.items():
        for level, chosen in sched["block_complexity_per_concurrency"].items():
            measured = sched["measured"][level]
            rows.append({"target": sched["target"], "method": method, "level": int(level), "bc": chosen,
                         "value": measured[str(chosen)], "objective": sched["objective"],
                         "candidates": ", ".join(f"BC {b}: {v:.3g}" for b, v in measured.items())})
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    objective = "goodput (req/s)" if frame["objective"].iloc[0] == "goodput" else "output tok/s"
    cols = [Column("Method", "method", numeric=False), Column("Concurrency", "level", digits=0),
            Column("BC", "bc", digits=0), Column(objective.capitalize(), "value", digits=2),
            Column("Candidates", "candidates", numeric=False)]
    notes = [f"The block complexity with the best {objective} at each concurrency (ties: the smaller); "
             f"{SCHEDULE_FILE} holds it as vLLM's num_speculative_tokens_per_batch_size (K = BC - 1). Chosen on "
             f"the same measurements it is shown with: an optimistic estimate of what the schedule gives."]
    return TableData(SCHEDULE_TITLE, cols, frame, notes)


def adaptive_table(rows: list[dict]) -> Optional[TableData]:
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    objective = "goodput" if frame["objective"].iloc[0] == "goodput" else "tok/s"
    cols = [Column("Method", "method", numeric=False), Column("Concurrency", "level", digits=0),
            Column("Scheduled BC", "scheduled_bc", digits=0), Column(f"Scheduled {objective}", "scheduled"),
            Column(f"Adaptive {objective}", "adaptive"), Column("Adaptive / scheduled", "ratio"),
            Column("Scheduled speedup", "scheduled_speedup"),
            Column("Adaptive speedup", "adaptive_speedup", interval=("adaptive_speedup_low", "adaptive_speedup_high"))]
    notes = ["`adaptive`: the method at `-bcadaptive` points (the budget chosen per step) against the BC the schedule "
             "picks for that concurrency."]
    return TableData(ADAPTIVE_TITLE, cols, frame, notes)


def terminal_table(table: TableData) -> TableData:
    """The load table with the columns a terminal has room for."""
    keep = {"target", "method", "point", "completed", "errors", "output_tok_s", "goodput", "ttft_p50", "tpot_p50",
            "latency_p99", "mean_accept_length", "lossless", "speedup"}
    return TableData(table.title, [c for c in table.columns if c.key in keep], table.frame, table.notes)


def build(run: metrics.LoadRun) -> tuple[pd.DataFrame, list[TableData], dict]:
    """(point summary, [load table, further tables...], schedule)."""
    summary = metrics.point_summary(run)
    plan = metrics.schedules(summary, run.slo)
    tables = [load_table(summary, run)]
    tables += [t for t in (acceptance_table(summary), crossover_table(metrics.crossovers(summary)),
                           schedule_table(plan), adaptive_table(metrics.adaptive_rows(summary, plan)))
               if t is not None]
    return summary, tables, plan


def schedule_document(plan: dict, slo: Optional[dict]) -> dict:
    """schedule.json: per method its BC per concurrency and vLLM's form of it."""
    return render.jsonable({"format": "specbench-load-schedule", "version": 1, "slo": slo, "methods": plan})


def _summary_for_json(summary: pd.DataFrame) -> pd.DataFrame:
    out = summary.copy()
    for col in ("conditional_acceptance", "marginal_acceptance"):
        out[col] = [{str(k): v for k, v in d.items()} if isinstance(d, dict) else d for d in out[col]]
    out["bc"] = [metrics._bc_key(b) or None for b in out["bc"]]
    return out


def load_run_or_fail(path: Path) -> metrics.LoadRun:
    run = metrics.load_run(path)
    for warning in run.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    if not run.records:
        from specbench_cli.errors import UsageError

        raise UsageError(f"no request recorded in {path} (nothing has finished yet?)")
    return run


def write_load_report(run_dir: Path, directory: Path, fmt: Optional[str] = None, plots: bool = True) -> Path:
    """Print the load table (or the `fmt` rendering on stdout) and write load.<ext> (every format,
    or only `fmt`), schedule.json when the run swept block complexity, and the figures."""
    import typer

    run = load_run_or_fail(run_dir)
    summary, tables, plan = build(run)
    main, extras = tables[0], tables[1:]
    written = []
    json_summary = _summary_for_json(summary)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name in [fmt] if fmt else report_formats.names():
            path = directory / f"{FILE_STEM}.{report_formats.get(name).extension}"
            atomic_write(path, render.render(main, name, json_summary, extras))
            written.append(path)
        if plan and fmt is None:
            path = directory / SCHEDULE_FILE
            atomic_write(path, json.dumps(schedule_document(plan, run.slo), indent=2) + "\n")
            written.append(path)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write to {directory}: {exc}") from exc
    if fmt:
        typer.echo(render.render(main, fmt, json_summary, extras), nl=False)
    else:
        print_table(terminal_table(main))
        for table in extras:
            print_table(table)
    if plots:
        from specbench_cli.report import load_plots

        written += load_plots.write_plots(summary, run, directory)
    err.print(f"wrote {len(written)} file{'s' if len(written) != 1 else ''} to {escape(str(directory))}",
              highlight=False)
    return directory


def write_load_html(run_dir: Path, path: Path, plots: bool = True) -> Path:
    """One self-contained page: the tables, the figures (SVG) and the run's settings."""
    run = load_run_or_fail(run_dir)
    summary, tables, _ = build(run)
    figures = []
    if plots:
        from specbench_cli.report import load_plots

        figures = load_plots.svg_figures(summary, run)
    text = page(run, tables, figures)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {path}: {exc}") from exc
    err.print(f"wrote {escape(str(path))}", highlight=False)
    return path


def page(run: metrics.LoadRun, tables: list[TableData], figures: list[tuple[str, str]]) -> str:
    """The HTML document of a load run."""
    from specbench_cli.report.html import _e, table_html, without_surrogates
    from specbench_cli.report.html_assets import CSS

    parts = [f"<header><h1>specbench load report</h1><p class=\"sub\">{_e(run.run_id)}</p></header>"]
    parts.append(f"<h2>{_e(LOAD_TITLE)}</h2>" + table_html(tables[0], caption=False))
    for table in tables[1:]:
        parts.append(f"<h2>{_e(table.title)}</h2>" + table_html(table, caption=False))
    if figures:
        shown = "".join(f"<figure>{svg}<figcaption>{_e(name)}</figcaption></figure>" for name, svg in figures)
        parts.append(f'<h2>Figures</h2><div class="figures">{shown}</div>')
    parts.append("<h2>Conditions</h2>")
    pairs = [(f"config.{k}", json.dumps(v, ensure_ascii=False)) for k, v in sorted((run.manifest.get("config") or {}).items())]
    pairs += [("slo", json.dumps(run.manifest.get("slo"))), ("machine", json.dumps(run.manifest.get("machine")))]
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in pairs)
    parts.append(f'<dl class="conditions">{rows}</dl>')
    return without_surrogates("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                              "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                              f"<title>specbench load report: {_e(run.run_id)}</title><style>{CSS}</style></head><body>"
                              + "\n".join(parts) + "</body></html>\n")
