"""Tiny PARD drafters in the published folder layout (a transformers model folder whose
config.json names the mask token: `"pard_token": ID, "spd_type": "pard"`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers.tiny import VOCAB

MASK_ID = VOCAB - 1  # a filler word no test prompt uses: the published drafters reuse a reserved id too


def pard_copy(draft_dir: str, mask_id: int = MASK_ID) -> str:
    """A copy of the draft model folder `draft_dir` beside it, declared a PARD drafter with
    `mask_id` as its mask token (made once per folder). Returns the copy's folder."""
    src = Path(draft_dir)
    out = src.parent / f"{src.name}-pard{mask_id}"
    if not (out / "config.json").is_file():
        tmp = src.parent / f"{out.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        config = json.loads((tmp / "config.json").read_text())
        config.update({"pard_token": mask_id, "spd_type": "pard"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        tmp.rename(out)
    return str(out)
