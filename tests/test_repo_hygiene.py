"""The repository speaks of the tool alone: no absolute paths of the machine it was made on and
no words about how the work was organised in prose, scripts, code or tests; no stray or derived
files; a README that is a user's guide (title first, then the two commands, at most 250 lines)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Built from pieces so this file does not match itself.
ABSOLUTE = re.compile(r"(?<![\w.$}/-])/(?:" + "|".join(["wo" + "rk", "ro" + "ot", "ho" + "me", "Us" + "ers"]) + r")/[\w.-]+")
PROCESS = re.compile(r"\b[Ii]ss" + r"ue \d+\b|\(iss" + r"ue\b|[Ii]ss" + r"ue-\d+|\b(?:first|second|third|this|previous|last|next|"
                     r"earlier) sess" + r"ion\b")
MAX_README_LINES = 250
MAX_FILE_BYTES = 5 * 1024 * 1024


def tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("git is not available")
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.splitlines() if f]


def prose_and_code(files: list[str]) -> list[str]:
    """README, docs, study READMEs, scripts under benchmarks/ and results/, tests and the package's code."""
    keep = []
    for f in files:
        if f == "README.md" or (f.startswith("docs/") and f.endswith(".md")):
            keep.append(f)
        elif f.startswith("results/reference/") and f.endswith(("README.md", "HISTORY.md")):
            keep.append(f)
        elif f.startswith(("benchmarks/", "results/")) and f.endswith((".sh", ".py", ".md", ".toml")):
            keep.append(f)
        elif f.startswith(("tests/", "specbench_cli/", "methods/", "tasks/", ".ci/")) and f.endswith((".py", ".sh", ".md")):
            keep.append(f)
        elif f in ("pyproject.toml", "setup.py", ".ci/run"):
            keep.append(f)
    return keep


def hits(pattern: re.Pattern, files: list[str]) -> list[str]:
    found = []
    for f in files:
        path = ROOT / f
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{f}:{n}: {line.strip()[:120]}")
    return found


def text_files(files: list[str]) -> list[str]:
    """Every tracked text file: result files (manifests, samples, tables) name no machine path either."""
    keep = []
    for f in files:
        path = ROOT / f
        if f == "tests/test_repo_hygiene.py" or path.is_symlink() or not path.is_file():
            continue
        head = path.read_bytes()[:8192]
        if b"\0" not in head:
            keep.append(f)
    return keep


def test_no_absolute_machine_paths():
    found = hits(ABSOLUTE, text_files(tracked()))
    assert not found, f"absolute machine paths in {len(found)} lines:\n" + "\n".join(found[:40])


def test_no_words_about_how_the_work_was_organised():
    found = hits(PROCESS, prose_and_code(tracked()))
    assert not found, "work-process words:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for():
    assert ABSOLUTE.search("see " + "/wo" + "rk/main/README.md") and not ABSOLUTE.search("${TMPDIR:-/tmp}/x /dev/null")
    assert PROCESS.search("fixed in iss" + "ue 12") and PROCESS.search("the previous sess" + "ion")
    assert not PROCESS.search("one decoding session of a resumed run")


def test_no_stray_or_derived_files():
    files = tracked()
    stray = [f for f in files if f.endswith((".orig", ".rej", ".pyc"))]
    derived = [f for f in files if f.startswith("results/") and f.endswith((".pdf", ".tex"))]
    assert not stray, stray
    assert not derived, f"report renders are rebuilt by `specbench report`, not committed: {derived[:5]}"


def test_no_big_files():
    big = [f for f in tracked() if (ROOT / f).is_file() and (ROOT / f).stat().st_size > MAX_FILE_BYTES]
    assert not big, f"files over 5 MB (models and datasets are never committed): {big}"


def test_readme_is_a_users_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; studies belong in results/reference/"
    assert lines[0].startswith("# ")
    commands = [line for line in lines[1:8] if line.startswith("pip install")]
    assert len(commands) == 2 and commands[0].endswith("specbench run") and commands[1].endswith("python -m pytest")


def test_every_study_has_a_readme_and_a_reproduce_script():
    reference = ROOT / "results" / "reference"
    for study in ("bc-sweep", "bc-auto", "forward", "sps-table", "heads", "fastcot", "msn", "reliability",
                  "sweep-example"):
        assert (reference / study / "README.md").is_file(), study
        assert (reference / study / "reproduce.sh").is_file(), study
