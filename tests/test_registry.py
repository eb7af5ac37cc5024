"""One registry mechanism: methods, head kinds, tasks, task sources (`hf:`, `speed-bench:`), report
formats and targets are each a `specbench_cli.registry.Registry` with the same API and an
entry-point group, and what lists their names (messages, help, `specbench list`) reads them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from helpers.cli import cli

from specbench_cli import methods, registry, targets, tasks
from specbench_cli.errors import UsageError
from specbench_cli.methods.heads import kinds
from specbench_cli.report import formats

ROOT = Path(__file__).resolve().parents[1]

# module, its Registry, the entry-point group, a built-in name
REGISTRIES = [
    (methods, methods._REGISTRY, "specbench.methods", "pld"),
    (kinds, kinds._REGISTRY, "specbench.head_kinds", "eagle"),
    (tasks, tasks._REGISTRY, "specbench.tasks", "mini"),
    (tasks, tasks._SOURCES, "specbench.task_sources", "hf"),
    (formats, formats._REGISTRY, "specbench.report_formats", "markdown"),
    (targets, targets._REGISTRY, "specbench.targets", "hf"),
]


@pytest.mark.parametrize("module,reg,group,builtin", REGISTRIES, ids=lambda x: getattr(x, "group", None))
def test_every_kind_of_name_is_one_registry_with_an_entry_point_group(module, reg, group, builtin):
    assert isinstance(reg, registry.Registry) and reg.group == group
    assert builtin in reg.builtins and builtin in reg.names()
    assert all(callable(getattr(module, api, None)) for api in ("get", "register", "describe") if module is not tasks
               or reg is tasks._REGISTRY)
    # every group is documented where a plugin author looks
    assert f'"{group}"' in (ROOT / "docs" / "adding-a-method.md").read_text(encoding="utf-8")


def test_every_builtin_entry_resolves_to_what_its_registry_declares():
    for _, reg, _, _ in REGISTRIES:
        if reg is targets._REGISTRY:
            continue  # the target module may import a runtime; its entry is checked below without importing it
        for name in reg.builtins:
            assert reg.get(name) is not None, (reg.kind, name)
    module, _, cls = targets.REGISTRY[targets.DEFAULT].partition(":")
    assert module.startswith("specbench_cli.targets.") and cls


def test_a_wrong_entry_is_one_usage_error_naming_the_base():
    reg = registry.Registry("thing", "specbench.things", "specbench_cli.report.formats:Format",
                            {"ok": "specbench_cli.report.render:CSV", "wrong": "specbench_cli.report.render:to_csv",
                             "missing": "specbench_cli.report.render:NOPE", "gone": "no_such_module_here:X"},
                            instances=True)
    assert reg.get("ok").extension == "csv"
    with pytest.raises(UsageError, match="thing 'wrong' .* is not an instance of specbench_cli.report.formats.Format"):
        reg.get("wrong")
    with pytest.raises(UsageError, match="has no attribute 'NOPE'"):
        reg.get("missing")
    with pytest.raises(UsageError, match="cannot import thing 'gone' from no_such_module_here"):
        reg.get("gone")
    with pytest.raises(UsageError, match="unknown thing 'okk'. Did you mean 'ok'?"):
        reg.get("okk")


def test_one_loader_of_module_attr_references():
    assert registry.load_ref("specbench_cli.report.render:CSV.extension") == "csv"
    assert not hasattr(kinds, "load_ref")  # the head kinds' trainers load through the registry's loader
    assert registry.load_ref(kinds.get("eagle").trainer).__class__.__name__ == "TrainerHooks"


PLUGIN = '''
from specbench_cli.methods.heads.kinds import HeadKind
from specbench_cli.methods.heads.eagle.kind import KIND as EAGLE
from specbench_cli.report.formats import Format
from specbench_cli.tasks import TaskSource
from specbench_cli.tasks.mini import Mini
import dataclasses

TSV = Format("tsv", "tab-separated", lambda table, summary, extras: "\\n".join(
    "\\t".join(row) for row in [table.headers, *table.cells()]) + "\\n")


def _letters(name, settings):
    class Letters(Mini):
        pass
    Letters.name = name
    return Letters


LETTERS = TaskSource("letters:WORD", "the mini suite under another name", _letters)
KIND = dataclasses.replace(EAGLE, name="eagle-twin")


class NotATarget:
    pass
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A real entry-point discovery: a .dist-info with entry_points.txt on sys.path, for every group."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sb_registry_demo.py").write_text(PLUGIN)
    info = site / "sb_registry_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sb-registry-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[specbench.report_formats]\ntsv = sb_registry_demo:TSV\nmarkdown = sb_registry_demo:TSV\n\n"
        "[specbench.task_sources]\nletters = sb_registry_demo:LETTERS\n\n"
        "[specbench.head_kinds]\neagle-twin = sb_registry_demo:KIND\n\n"
        "[specbench.targets]\nnot-a-target = sb_registry_demo:NotATarget\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    for _, reg, _, _ in REGISTRIES:
        monkeypatch.setattr(reg, "entries", dict(reg.entries))
        monkeypatch.setattr(reg, "plugins", dict(reg.plugins))
        monkeypatch.setattr(reg, "_discovered", False)
    return site


def test_an_installed_package_adds_a_format_a_task_source_a_head_kind_and_a_target(plugin):
    assert formats.names() == ["markdown", "csv", "latex", "json", "tsv"]
    assert formats.get("markdown").extension == "md"  # a built-in name cannot be taken over
    assert formats._REGISTRY.plugins == {"tsv": "sb-registry-demo"}
    letters = tasks.get("letters:abc")
    assert letters.name == "letters:abc" and letters.load()
    assert "letters:WORD" in [s.usage for s in tasks.sources()]
    assert "eagle-twin" in kinds.names() and kinds.get("eagle-twin").name == "eagle-twin"
    assert "eagle-twin" in [k.name for k in kinds.kinds()]  # heads folders of the kind are recognised
    assert targets.names() == ["hf", "llama.cpp", "zero-cost", "not-a-target"]
    with pytest.raises(UsageError, match="target 'not-a-target' .* is not a subclass of"):
        targets.get("not-a-target")


def test_report_writes_every_registered_format(plugin, tmp_path):
    from helpers.rows import synthetic_rows

    from specbench_cli.report import metrics
    from specbench_cli.report.runs import write_tables
    from specbench_cli.report.table import spec_bench_table

    summary = metrics.summarize(synthetic_rows())
    written = write_tables(spec_bench_table(summary), summary, tmp_path / "r", formats.names())
    assert [p.name for p in written] == ["table.md", "table.csv", "table.tex", "table.json", "table.tsv"]
    assert (tmp_path / "r" / "table.tsv").read_text().startswith("Method\t")


def test_list_shows_every_registry(capsys):
    for what, expect in (("tasks", "hf:PATH_OR_ID[:CONFIG][:SPLIT]"), ("tasks", "speed-bench:CONFIG"),
                         ("formats", "table.tex"), ("targets", "hf"), ("head-kinds", "hydra")):
        code, out, err = cli(["list", what], capsys)
        assert code == 0 and expect in out, (what, err)


def test_messages_read_the_names_from_the_registries(capsys, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question_id": 1, "category": "qa", "turns": ["hi"]}\n')
    code, _, err = cli(["run", "--tasks", "mini", "--questions", str(questions), "--output-dir", str(tmp_path)],
                       capsys)
    assert code == 2
    *some, last = tasks.reading_questions_file()
    assert f"use --tasks {', '.join(some)} or {last} with a file" in " ".join(err.split())
    assert "speed-bench" in some + [last]  # a suite that reads --questions, missing from any hand-written list
    code, _, err = cli(["run", "--tasks", "nope:x", "--output-dir", str(tmp_path)], capsys)
    assert code == 2 and "hf:PATH_OR_ID[:CONFIG][:SPLIT]" in err and "speed-bench:CONFIG" in err
