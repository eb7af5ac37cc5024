"""Every path that reads a question, template or training file goes through one guarded reader
(specbench_cli/jsonl.py) with the same limits: a special file is refused by type (never opened),
a file over the size bound is refused before it is read, text must be UTF-8, JSON may nest at
most 100 levels. Each reader below gets each hostile file and must answer with the one-line
UsageError; none may hang, crash, or die by a signal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from specbench_cli import jsonl
from specbench_cli.errors import UsageError

DEEP = "[" * 100_000 + "]" * 100_000


def _hf(path):
    pytest.importorskip("datasets")
    from specbench_cli.tasks import hf

    return hf.load_rows(f"hf:{path}")


def _speed_bench(path):
    pytest.importorskip("datasets")
    from specbench_cli.tasks import speed_bench

    return speed_bench.read_rows("qualitative", str(path))


def _template(path):
    from specbench_cli.models.templates import check_template

    return check_template(str(path))


def _training_data(path):
    from specbench_cli.training.draft_model.distill_data import load_jsonl

    return load_jsonl(path, "--data")


def _training_text(path):
    from specbench_cli.training.common.io import read_text_file

    return read_text_file(path, "--text file")


def _spec_bench(path):
    from specbench_cli.tasks.spec_bench import SpecBench

    return SpecBench.load(str(path))


def _jsonl(path):
    from specbench_cli.tasks.jsonl import Jsonl

    return Jsonl.load(str(path))


def _humaneval(path):
    from specbench_cli.tasks.humaneval import HumanEval

    return HumanEval.load(str(path))


def _spec_bench_overlap(path):
    from specbench_cli.training.heads.data import spec_bench_overlap

    return spec_bench_overlap([{"instruction": "hi"}], path)


# reader -> (suffix of its files, does it parse JSON)
READERS = {
    "jsonl": (_jsonl, ".jsonl", True),
    "spec_bench": (_spec_bench, ".jsonl", True),
    "humaneval": (_humaneval, ".jsonl", True),
    "hf:": (_hf, ".jsonl", True),
    "speed-bench": (_speed_bench, ".jsonl", True),
    "template": (_template, ".jinja", False),
    "training data": (_training_data, ".jsonl", True),
    "training text": (_training_text, ".txt", False),
    "heads training's question overlap": (_spec_bench_overlap, ".jsonl", True),
}


def _hostile(tmp_path, kind: str, suffix: str):
    path = tmp_path / f"{kind}{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "big":
        path.write_text('{"question_id": 1, "turns": ["' + "x" * 5000 + '"]}\n')
    elif kind == "deep":
        path.write_text('{"question_id": 1, "turns": ' + DEEP + "}\n")
    elif kind == "latin1":
        path.write_bytes(b'{"question_id": 1, "turns": ["caf\xe9"]}\n')
    return path


EXPECTED = {"fifo": "is a FIFO (named pipe)", "device": "is a character device", "big": "more than the",
            "deep": "deeper than 100 levels", "latin1": "not UTF-8 text"}


@pytest.mark.parametrize("kind", list(EXPECTED))
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_every_hostile_file_in_one_line(reader, kind, tmp_path, monkeypatch):
    read, suffix, parses_json = READERS[reader]
    if kind == "deep" and not parses_json:
        pytest.skip("not JSON: nesting means nothing to this reader")
    if kind == "big":  # the bounds made small, so that a small file is "too big"
        import specbench_cli.models.templates as templates

        monkeypatch.setattr(jsonl, "MAX_INPUT_BYTES", 4096)
        monkeypatch.setattr(templates, "MAX_TEMPLATE_BYTES", 4096)
    with pytest.raises(UsageError) as caught:
        read(_hostile(tmp_path, kind, suffix))
    message = str(caught.value)
    assert "\n" not in message and EXPECTED[kind] in message, message


def test_the_builtin_refine_suite_is_read_through_the_guard(monkeypatch):
    from specbench_cli.tasks.refine import Refine

    seen = []
    real = jsonl.guard
    monkeypatch.setattr(jsonl, "guard", lambda path, *a, **k: seen.append(path) or real(path, *a, **k))
    assert Refine.load() and [p.name for p in seen] == ["refine.jsonl"]


def test_a_gzipped_file_is_bounded_by_its_decompressed_size(tmp_path, monkeypatch):
    import gzip

    bomb = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(bomb, "wb") as f:
        f.write(b" " * 100_000)
    monkeypatch.setattr(jsonl, "MAX_INPUT_BYTES", 4096)
    with pytest.raises(UsageError, match="more than 4096 bytes of text once decompressed"):
        _humaneval(bomb)


def test_a_speed_bench_folder_of_hostile_files_is_refused_too(tmp_path):
    pytest.importorskip("datasets")
    folder = tmp_path / "copy" / "qualitative"
    folder.mkdir(parents=True)
    (folder / "test.jsonl").write_text('{"question_id": 1, "category": "qa", "turns": ' + DEEP + "}\n")
    with pytest.raises(UsageError, match="deeper than 100 levels"):
        _speed_bench(tmp_path / "copy")


def test_deep_json_for_speed_bench_is_exit_2_never_a_segfault(tmp_path):
    """The reported case, in a process of its own: it died with exit 139 and no message."""
    pytest.importorskip("datasets")
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"question_id": 1, "category": "qa", "turns": ' + DEEP + "}\n")
    proc = subprocess.run([sys.executable, "-m", "specbench_cli", "run", "--tasks", "speed-bench", "--questions",
                           str(deep), "--output-dir", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "nests JSON deeper than 100 levels" in lines[0]
    assert not (tmp_path / "out").exists()
