"""The result file of the forward benchmarks: one JSON document, written to `--out` if given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def write_result(res: dict, out: Optional[Path]) -> str:
    """`res` as indented JSON text; also written to `out` (parents created) when `out` is set."""
    text = json.dumps(res, indent=1)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return text
