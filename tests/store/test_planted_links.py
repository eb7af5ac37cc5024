"""Nothing specbench writes follows a symbolic link it did not create. A run folder, sweep folder
or cache from elsewhere may hold links planted where specbench writes (`run.lock -> FILE`,
`manifest.tmp -> FILE`, `report -> FOLDER`, `.NAME.lock -> FILE`); each is refused in one line
(exit 2) or replaced by a file of specbench's own, and the file it names is never touched."""

from __future__ import annotations

import json
import os

import pytest
from helpers.cli import cli
from helpers.rows import synthetic_rows, write_run

from specbench_cli.errors import UsageError

PRECIOUS = "precious: must never be overwritten\n"


@pytest.fixture
def victim(tmp_path):
    """A file outside every folder specbench writes, that a planted link points at."""
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir()
    path.write_text(PRECIOUS)
    return path


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "run", synthetic_rows(seed=1, methods=("pld",), questions_per_category=1))


@pytest.fixture
def no_model(monkeypatch):
    import specbench_cli.models.load

    monkeypatch.setattr(specbench_cli.models.load, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return " ".join(lines[0].split())


@pytest.mark.parametrize("name", ["run.lock", "manifest.json", "samples.jsonl"])
def test_resume_refuses_a_link_where_the_run_writes(run, victim, name, capsys, no_model):
    planted = run / name
    planted.unlink(missing_ok=True)
    planted.symlink_to(victim)
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 2
    assert f"{planted} is a symbolic link" in _one_error_line(err)
    assert victim.read_text() == PRECIOUS and planted.is_symlink()


def test_resume_refuses_a_fifo_where_the_run_reads_before_saying_anything(run, capsys, no_model):
    os.mkfifo(run / "run.lock")
    code, _, err = cli(["run", "--resume", str(run), "--no-report"], capsys)
    assert code == 2 and "run.lock is a FIFO (named pipe)" in _one_error_line(err)


def test_the_folder_lock_never_writes_its_pid_through_a_link(tmp_path, victim):
    from specbench_cli.store.lock import FolderLock

    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.lock").symlink_to(victim)
    with pytest.raises(UsageError, match="sweep.lock is a symbolic link"):
        FolderLock(tmp_path / "sweep", "sweep.lock", "sweep").acquire()
    assert victim.read_text() == PRECIOUS


def test_a_fifo_lock_file_is_refused_instead_of_blocking(tmp_path):
    from specbench_cli.store.lock import FolderLock

    os.mkfifo(tmp_path / "run.lock")
    with pytest.raises(UsageError, match="is a FIFO"):
        FolderLock(tmp_path, "run.lock", "run").acquire()


def test_manifest_and_rows_are_never_written_through_links(run, victim):
    """The old fixed temporary names (`manifest.tmp`, `samples.jsonl.tmp`) planted as links are
    left alone; a link at the manifest's own name is replaced by the new manifest; the row file
    is appended to and repaired only when it is no link."""
    from specbench_cli.store.runfolder import RunFolder

    store = RunFolder.open(run)
    for name in ("manifest.tmp", "samples.jsonl.tmp", "samples.tmp"):
        (run / name).symlink_to(victim)
    store.update_manifest(finished="now")
    assert store.drop_rows(lambda row: row["method"] == "pld") > 0
    assert victim.read_text() == PRECIOUS
    (run / "manifest.json").unlink()
    (run / "manifest.json").symlink_to(victim)
    store.write_manifest({"run_id": "x"})
    assert victim.read_text() == PRECIOUS
    assert not (run / "manifest.json").is_symlink() and json.loads((run / "manifest.json").read_text()) == {"run_id": "x"}
    (run / "samples.jsonl").unlink()
    (run / "samples.jsonl").symlink_to(victim)
    for write in (lambda: store.append({"method": "ar"}), store.repair_tail):
        with pytest.raises(UsageError, match="samples.jsonl is a symbolic link"):
            write()
    assert victim.read_text() == PRECIOUS


def test_atomic_writes_replace_a_link_at_the_target(tmp_path, victim):
    from specbench_cli.atomic import atomic_write

    target = tmp_path / "table.md"
    target.symlink_to(victim)
    atomic_write(target, "new table")
    atomic_write(tmp_path / "plot.png", lambda p: p.write_bytes(b"png"))
    assert victim.read_text() == PRECIOUS and not target.is_symlink() and target.read_text() == "new table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "plot.png", "table.md"]


def test_report_refuses_a_report_folder_that_is_a_link(run, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "report").symlink_to(elsewhere)
    for html in ([], ["--html"]):  # refused before any work (the page would load a tokenizer first)
        code, _, err = cli(["report", str(run), "--no-plots", *html], capsys)
        assert code == 2
        assert f"{run / 'report'} is a symbolic link" in _one_error_line(err)
    assert list(elsewhere.iterdir()) == []


def test_sweep_logs_are_never_appended_through_links(tmp_path, victim):
    from specbench_cli.sweep import jobs

    job = tmp_path / "job"
    job.mkdir()
    (job / "attempts.jsonl").symlink_to(victim)
    with pytest.raises(UsageError, match="attempts.jsonl is a symbolic link"):
        jobs._log_attempt(job, {"event": "start"})
    assert victim.read_text() == PRECIOUS


def test_a_planted_lock_link_in_the_model_cache_is_replaced(tmp_path, victim):
    from specbench_cli.models.cache import ensure_entry

    root = tmp_path / "models"
    root.mkdir()
    (root / ".entry.lock").symlink_to(victim)
    entry = ensure_entry(root / "entry", lambda d: (d / "config.json").write_text("{}"), say=print)
    assert (entry / "config.json").read_text() == "{}"
    assert victim.read_text() == PRECIOUS
    assert not (root / ".entry.lock").is_symlink()


def test_a_planted_link_in_a_keyed_cache_is_read_as_invalid_and_replaced(tmp_path, victim):
    from specbench_cli.json_cache import KeyedJsonCache

    cache = KeyedJsonCache("things", "thing", "measuring it again", lambda d: d["value"], lambda v: v)
    key = {"k": 1}
    path = cache.path(key, tmp_path)
    path.parent.mkdir()
    path.symlink_to(victim)
    said = []
    assert cache.load(key, tmp_path, said.append) is None
    assert len(said) == 1 and "is a symbolic link; measuring it again" in said[0]
    cache.save({"key": key, "value": 3}, tmp_path, said.append)
    assert victim.read_text() == PRECIOUS and not path.is_symlink()
    assert cache.load(key, tmp_path, said.append) == 3 and len(said) == 1
