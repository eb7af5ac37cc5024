"""Report formats: name -> "module:ATTR" of a `Format` (its file extension and its renderer).

The built-in ones (markdown, csv, LaTeX, json) are declared in report/render.py and listed
here; other packages add formats through the `specbench.report_formats` entry-point group (see
`specbench_cli/registry.py`). `specbench report` writes every registered format (or the one
`--format` names) as `table.<extension>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from specbench_cli.registry import Registry


@dataclass(frozen=True)
class Format:
    """extension: of the files written (`table.<extension>`, `batch.<extension>`).
    render: (main table, summary frame or None, further tables) -> the file's text; a format may
    leave out the further tables (acceptance, difficulty) or the summary."""

    extension: str
    summary: str
    render: Callable[[Any, Optional[Any], Sequence[Any]], str]


_REGISTRY = Registry("format", "specbench.report_formats", "specbench_cli.report.formats:Format", {
    "markdown": "specbench_cli.report.render:MARKDOWN",
    "csv": "specbench_cli.report.render:CSV",
    "latex": "specbench_cli.report.render:LATEX",
    "json": "specbench_cli.report.render:JSON",
}, instances=True)
REGISTRY = _REGISTRY.entries
BUILTIN = _REGISTRY.builtins  # for help texts, read before any plugin is looked for
DESCRIBED = {"extension": "", "summary": ""}

names = _REGISTRY.names
get = _REGISTRY.get
register = _REGISTRY.register


def describe(name: str) -> dict:
    return _REGISTRY.describe(name, DESCRIBED)
