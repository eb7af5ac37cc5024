"""Whole-file writes are atomic: a failure mid-write leaves the old content (or nothing), never a
0-byte or half-written file, and no temporary file behind."""

from __future__ import annotations

import pytest

from specbench_cli.atomic import atomic_write


class DiskFull(OSError):
    pass


def test_text_bytes_and_writer_functions(tmp_path):
    assert atomic_write(tmp_path / "a.txt", "héllo").read_text(encoding="utf-8") == "héllo"
    assert atomic_write(tmp_path / "b.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    assert atomic_write(tmp_path / "c.txt", lambda p: p.write_text("from a writer")).read_text() == "from a writer"


@pytest.mark.parametrize("existing", [None, "old content"])
def test_a_failing_write_keeps_the_old_file_or_none(tmp_path, existing):
    target = tmp_path / "table.md"
    if existing is not None:
        target.write_text(existing)

    def half_then_full(path):
        path.write_text("half a tab")
        raise DiskFull(28, "No space left on device")

    with pytest.raises(DiskFull):
        atomic_write(target, half_then_full)
    assert (target.read_text() if target.exists() else None) == existing
    assert [p.name for p in tmp_path.iterdir()] == ([] if existing is None else ["table.md"])


def test_report_baseline_and_export_outputs_survive_a_full_disk(tmp_path, capsys, monkeypatch):
    """The commands write through atomic_write: a write that fails leaves no 0-byte file."""
    from helpers.cli import cli
    from helpers.rows import synthetic_rows, write_run

    import specbench_cli.atomic as atomic

    run = write_run(tmp_path / "run", synthetic_rows(seed=2, methods=("pld",), questions_per_category=1))
    real_open = open

    def full_disk_open(path, mode="r", *a, **k):
        if "w" in mode and ".tmp" in str(path):
            raise DiskFull(28, "No space left on device")
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(atomic, "open", full_disk_open, raising=False)
    for args, out in ((["baseline", str(run), "-o", str(tmp_path / "b.json")], tmp_path / "b.json"),
                      (["export", str(run), "-o", str(tmp_path / "answers")], tmp_path / "answers"),
                      (["report", str(run), "--no-plots", "-o", str(tmp_path / "rep")], tmp_path / "rep")):
        code, _, _ = cli(args, capsys)
        assert code != 0
        files = [out] if out.suffix else (list(out.iterdir()) if out.exists() else [])
        assert all(not f.exists() or f.stat().st_size > 0 for f in files), files
