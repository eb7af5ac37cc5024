"""The distribution a user installs: the built wheel's requirements are ranges, never one build.

A requirement pinned to one version (`torch==2.13.0`) makes `pip install specbench-cli` replace
whatever build a machine has (a GPU machine's CUDA torch) or fail where the registry cannot be
reached. The pin for a CPU machine belongs in the README's commands, not in the package.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXACT = ("==", "===")


def exact_pins(requirements: list[str]) -> list[str]:
    """The requirements (Requires-Dist values) that allow exactly one version."""
    from packaging.requirements import Requirement

    return [r for r in requirements if any(s.operator in EXACT for s in Requirement(r).specifier)]


@pytest.fixture(scope="module")
def wheel_metadata(tmp_path_factory) -> email.message.Message:
    """METADATA of the wheel built from a copy of the sources (the build leaves nothing in the
    checkout): what `pip install specbench-cli` reads."""
    pytest.importorskip("setuptools")
    base = tmp_path_factory.mktemp("wheel")
    src, dist = base / "src", base / "dist"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in ("specbench_cli", "methods", "tasks"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    for file in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / file, src / file)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(dist), str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (wheel,) = dist.glob("specbench_cli-*.whl")
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(name))


def test_no_requirement_of_the_built_wheel_pins_an_exact_version(wheel_metadata):
    requirements = wheel_metadata.get_all("Requires-Dist") or []
    assert any(r.startswith("torch") for r in requirements), requirements  # the metadata was read
    assert exact_pins(requirements) == []


def test_torch_is_a_range_from_the_version_the_suite_passed_on(wheel_metadata):
    from packaging.requirements import Requirement

    (torch,) = [Requirement(r) for r in wheel_metadata.get_all("Requires-Dist") if Requirement(r).name == "torch"]
    assert "2.13.0" in torch.specifier and "2.12.1" not in torch.specifier
    assert "2.99" in torch.specifier and "3.0" not in torch.specifier  # below the next major


def test_the_check_would_catch_a_pin():
    assert exact_pins(["torch==2.13.0", "numpy", "transformers>=5.0,<5.40", "x===1.0; extra == 'a'"]) == [
        "torch==2.13.0", "x===1.0; extra == 'a'"]


def test_the_readme_commands_still_pin_the_cpu_wheel():
    """A CPU machine installs the CPU build the suite passed on, not the newest CUDA one."""
    commands = (ROOT / "README.md").read_text(encoding="utf-8").split("```")[1]
    assert all("torch==2.13.0" in line for line in commands.splitlines() if "pip install" in line)
    assert "torch==2.13.0" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
