"""Checkpoint folders of every trainer: `<root>/step-NNNNNNN/`, written whole or not at all.

A checkpoint is written into `step-NNNNNNN.tmp/` and renamed when complete, so an interrupted
save never leaves a half checkpoint that `--resume` would pick up; only the newest `keep` stay.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable


def step_folder(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:07d}"


def list_checkpoints(root: Path, complete: Callable[[Path], bool]) -> list[Path]:
    """Complete checkpoints under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if p.name[5:].isdigit() and complete(p)]
    return sorted(found, key=lambda p: int(p.name[5:]))


def write_checkpoint(root: Path, step: int, write: Callable[[Path], None], keep: int,
                     complete: Callable[[Path], bool]) -> Path:
    """`write(folder)` fills a fresh temporary folder, which then becomes `step-NNNNNNN`;
    older complete checkpoints beyond the newest `keep` are deleted."""
    ck = step_folder(root, step)
    tmp = ck.with_name(ck.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    write(tmp)
    shutil.rmtree(ck, ignore_errors=True)
    tmp.rename(ck)
    for old in list_checkpoints(root, complete)[:-keep]:
        shutil.rmtree(old)
    return ck
