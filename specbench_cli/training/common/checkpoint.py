"""Checkpoint folders of every trainer: `<root>/step-NNNNNNN/`, written whole or not at all.

A checkpoint is written into `step-NNNNNNN.tmp/` and renamed when complete, so an interrupted
save never leaves a half checkpoint that `--resume` would pick up; only the newest `keep` stay.

Links: a link planted in the checkpoints folder (a downloaded or shared training folder) is never
written through nor removed through: the temporary folder is made fresh (a link or leftover at its
name removed as itself first), a link at a step's name is not a checkpoint (never resumed from,
never rotated), and one at the name a save takes is unlinked; a link as the checkpoints folder
itself is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from specbench_cli.atomic import remove_entry
from specbench_cli.errors import link_refused


def step_folder(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:07d}"


def list_checkpoints(root: Path, complete: Callable[[Path], bool]) -> list[Path]:
    """Complete checkpoints under `root`, oldest first (real folders: a link is none)."""
    root = Path(root)
    if root.is_symlink() or not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if p.name[5:].isdigit() and not p.is_symlink() and complete(p)]
    return sorted(found, key=lambda p: int(p.name[5:]))


def write_checkpoint(root: Path, step: int, write: Callable[[Path], None], keep: int,
                     complete: Callable[[Path], bool]) -> Path:
    """`write(folder)` fills a fresh temporary folder, which then becomes `step-NNNNNNN`;
    older complete checkpoints beyond the newest `keep` are deleted."""
    root = Path(root)
    if root.is_symlink():
        raise link_refused(root)
    ck = step_folder(root, step)
    tmp = ck.with_name(ck.name + ".tmp")
    remove_entry(tmp)  # a leftover of an interrupted save, or a planted link: removed as itself
    root.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()  # fresh: fails rather than reuse whatever took the name since
    write(tmp)
    remove_entry(ck)
    tmp.rename(ck)
    for old in list_checkpoints(root, complete)[:-keep]:
        remove_entry(old)
    return ck
