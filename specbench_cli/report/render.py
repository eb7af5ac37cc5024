"""Renderers of a `report.TableData`: markdown, csv, LaTeX and json, each declared as a report
`Format` (registered in report/formats.py)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Sequence

import pandas as pd

from specbench_cli.report import formats
from specbench_cli.report.formats import Format
from specbench_cli.report.table import TableData, printable


def to_markdown(table: TableData) -> str:
    """GitHub-flavoured markdown: title, pipe table (numbers right-aligned), notes."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(printable(c).replace("|", "\\|") for c in cells) + " |"

    align = ["---:" if c.numeric else ":---" for c in table.columns]
    lines = [f"**{printable(table.title)}**", "", line(table.headers), line(align)]
    lines += [line(cells) for cells in table.cells()]
    if table.notes:
        lines += [""] + [f"- {printable(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


def to_csv(table: TableData) -> str:
    """Numbers, not display strings: the wide frame's columns (means and stds separately)."""
    keys = []
    for col in table.columns:
        keys += [col.key] + ([col.std_key] if col.std_key else []) + ([col.share_key] if col.share_key else [])
        keys += list(col.interval or ())
    buffer = io.StringIO()
    table.frame[keys].to_csv(buffer, index=False, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    return buffer.getvalue()


LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "±": r"$\pm$", "–": "--", "→": r"$\rightarrow$", "↑": r"$\uparrow$", "↓": r"$\downarrow$",
    "—": "---", "<": r"\textless{}", ">": r"\textgreater{}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX specials (and map ±, –, arrows) so any label compiles (control characters,
    newlines among them, become spaces)."""
    return "".join(LATEX_SPECIALS.get(ch, ch) for ch in printable(text))


def to_latex(table: TableData) -> str:
    """A complete article document with one plain `tabular` (no packages beyond graphicx)."""
    spec = "".join("r" if c.numeric else "l" for c in table.columns)
    def line(cells: Sequence[str]) -> str:
        return " & ".join(latex_escape(c) for c in cells) + r" \\"

    body = [r"\hline", line(table.headers), r"\hline"]
    body += [line(cells) for cells in table.cells()] + [r"\hline"]
    wide = len(table.columns) > 8
    tabular = [rf"\begin{{tabular}}{{{spec}}}", *body, r"\end{tabular}"]
    if wide:
        tabular = [r"\resizebox{\textwidth}{!}{%", *tabular, "}"]
    notes = [r"\par\smallskip\footnotesize " + latex_escape(n) for n in table.notes]
    return "\n".join([
        r"\documentclass{article}",
        r"\usepackage[T1]{fontenc}",
        r"\usepackage{graphicx}",
        r"\begin{document}",
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{latex_escape(table.title)}}}",
        *tabular,
        *notes,
        r"\end{table}",
        r"\end{document}",
    ]) + "\n"


def jsonable(value: object) -> object:
    """Recursively turn numpy/pandas scalars into JSON types and NaN into null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _table_doc(table: TableData) -> dict:
    return {
        "title": table.title,
        "headers": table.headers,
        "cells": table.cells(),
        "rows": table.frame.to_dict(orient="records"),
        "notes": table.notes,
    }


def to_json(table: TableData, summary: pd.DataFrame | None = None, extras: Sequence[TableData] = ()) -> str:
    """The table (headers, display cells, numeric rows), notes, the further tables (`tables`:
    acceptance, difficulty) and optionally the full summary."""
    doc = _table_doc(table)
    if extras:
        doc["tables"] = [_table_doc(extra) for extra in extras]
    if summary is not None:
        doc["summary"] = summary.to_dict(orient="records")
    return json.dumps(jsonable(doc), indent=2, ensure_ascii=False) + "\n"


# markdown and json carry the `extras` too (the acceptance and difficulty tables), csv and LaTeX
# hold the main table only.
MARKDOWN = Format("md", "GitHub-flavoured markdown, every table",
                  lambda table, summary, extras: "\n".join(to_markdown(t) for t in (table, *extras)))
CSV = Format("csv", "the main table's numbers (means and stds in columns of their own)",
             lambda table, summary, extras: to_csv(table))
LATEX = Format("tex", "a LaTeX document with the main table", lambda table, summary, extras: to_latex(table))
JSON = Format("json", "every table, display cells and numbers, and the summary", to_json)


def render(table: TableData, fmt: str, summary: pd.DataFrame | None = None, extras: Sequence[TableData] = ()) -> str:
    """Render `table` in the registered format `fmt` (UsageError naming the formats for another)."""
    return formats.get(fmt).render(table, summary, extras)


# Spec-Bench leaderboard-style abbreviations, used when the terminal is too narrow.
