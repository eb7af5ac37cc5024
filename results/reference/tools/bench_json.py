"""Result files of the benchmarks: the forward benchmarks' JSON document and the Markdown tables of
the heads benchmarks, each printed or returned and written to an output path if one is given
(atomically: a link planted at the path is replaced, never written through)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from specbench_cli.atomic import atomic_write  # replaces a link at the name, never writes through it


def write_result(res: dict, out: Optional[Path]) -> str:
    """`res` as indented JSON text; also written to `out` (parents created) when `out` is set."""
    text = json.dumps(res, indent=1)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, text + "\n")
    return text


def write_table(lines: list[str], out: Optional[Path]) -> str:
    """`lines` as one Markdown text, printed; also written to `out` when `out` is set."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        atomic_write(out, text)
    return text
