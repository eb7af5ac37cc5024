"""What a planted link names in the link tests: a file and a folder outside every output folder,
and the check that neither was written through."""

from __future__ import annotations

from pathlib import Path


def victim(tmp_path: Path) -> tuple[Path, Path]:
    """A file and a folder outside every output folder, which a planted link names."""
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "file.txt").write_text("precious")
    (outside / "folder" / "keep.txt").write_text("precious too")
    return outside / "file.txt", outside / "folder"


def untouched(file: Path, folder: Path) -> bool:
    return file.read_text() == "precious" and sorted(p.name for p in folder.iterdir()) == ["keep.txt"]
