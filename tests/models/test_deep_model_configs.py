"""A model folder's own JSON files are read through the bounded reader: a `config.json` nested far
past any real one is one line naming the file, exit 2, before the model loads (json's recursive
parser raised RecursionError, a traceback naming no file)."""

from __future__ import annotations

import shutil

import pytest
from helpers.cli import cli

import specbench_cli.models.load


@pytest.fixture
def no_model_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad-input case")

    monkeypatch.setattr(specbench_cli.models.load, "load_model", refuse)


def test_a_model_config_nested_200000_deep_is_one_line_naming_it(tmp_path, tiny_model_dir, no_model_loads, capsys):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    code, out, err = cli(["run", "--model", str(folder), "--methods", "ar", "--tasks", "mini", "--limit", "1",
                          "--output-dir", str(tmp_path / "runs")], capsys)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert str(folder / "config.json") in lines[0] and "nested deeper" in lines[0]
    assert "Traceback" not in err and "RecursionError" not in err
