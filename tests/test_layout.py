"""The package's shape: layers import only downwards (import-linter contracts in pyproject.toml),
no two modules import each other through any chain, ruff is clean, and every package folder is
part of the distribution.

`methods/` and `tasks/` live beside `specbench_cli/` and install as `specbench_cli.methods` /
`specbench_cli.tasks`; import-linter reads one folder per package, so the checks run on a copy
of the installed layout: `specbench_cli/` with `methods/` and `tasks/` inside.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed_layout(tmp_path_factory) -> Path:
    """A copy of the package as it installs, plus pyproject.toml (the contracts)."""
    base = tmp_path_factory.mktemp("layout")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "data")
    shutil.copytree(ROOT / "specbench_cli", base / "specbench_cli", ignore=ignore)
    for folder in ("methods", "tasks"):
        shutil.copytree(ROOT / folder, base / "specbench_cli" / folder, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", base / "pyproject.toml")
    return base


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_import_linter_contracts_are_kept(installed_layout):
    pytest.importorskip("importlinter")
    res = _python("import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())", installed_layout)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_contracts_would_catch_an_upward_import(installed_layout, tmp_path):
    """The layers contract is not vacuous: a decoding-core module that imports the run layer breaks it."""
    pytest.importorskip("importlinter")
    broken = tmp_path / "broken"
    shutil.copytree(installed_layout, broken)
    with open(broken / "specbench_cli" / "decoding" / "draft.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _upward():\n    from specbench_cli.run import runner  # noqa: F401\n")
    res = _python("import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())", broken)
    assert res.returncode != 0 and "BROKEN" in res.stdout


CYCLES = r"""
import grimp, sys
g = grimp.build_graph("specbench_cli")
mods = sorted(g.modules)
index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in g.find_modules_directly_imported_by(v):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(sorted(comp))
for m in mods:
    if m not in index: visit(m)
print(out)
sys.exit(1 if out else 0)
"""


def test_no_import_cycles(installed_layout):
    """No module reaches itself through imports (function-level imports included): a package
    importing its own parent's `__init__` is the only way a cycle could hide, and there is none."""
    pytest.importorskip("grimp")
    res = _python(CYCLES, installed_layout)
    assert res.returncode == 0, f"import cycles: {res.stdout}{res.stderr[-2000:]}"


def test_ruff_is_clean():
    pytest.importorskip("ruff")
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:]


def test_every_package_folder_is_distributed():
    """setup.py discovers packages: each folder with an __init__.py under the three roots is one."""
    sys.path.insert(0, str(ROOT))
    try:
        from setuptools import find_packages
    finally:
        sys.path.pop(0)
    found = set(find_packages(str(ROOT), include=["specbench_cli", "specbench_cli.*"]))
    for folder in ("methods", "tasks"):
        found |= {f"specbench_cli.{p}" for p in find_packages(str(ROOT), include=[folder, f"{folder}.*"])}
    on_disk = set()
    for root in ("specbench_cli", "methods", "tasks"):
        for init in (ROOT / root).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            on_disk.add(".".join(rel if root == "specbench_cli" else ("specbench_cli",) + rel))
    assert on_disk == found
    setup_py = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert "find_packages" in setup_py and "packages = [" not in (ROOT / "pyproject.toml").read_text()


def test_no_two_classes_share_a_name():
    """A class name says which concept it is: two classes of one name (two `Grid`s, two
    `Generation`s) are two concepts a reader cannot tell apart in a traceback or an import."""
    import ast
    from collections import defaultdict

    where: dict[str, list[str]] = defaultdict(list)
    for folder in ("specbench_cli", "methods", "tasks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"classes defined more than once: {shared}"
