"""pytest, made to prove which `specbench_cli` the tests imported (the GPU check's lossless step).

    python benchmarks/gpu/installed_pytest.py PACKAGE_FOLDER [pytest arguments...]

Runs pytest in this process with the given arguments; once the tests are collected (every test
module imported), the `specbench_cli` they imported must live in PACKAGE_FOLDER (the installed
package the caller imported itself), else the pytest run stops with exit status 3 before any test
runs: a checkout's source folder, which lacks `methods` and `tasks`, reached through the current
folder or a test folder on the path, can no longer pass for the installed package. The header of
pytest's output names the folder. Run it as a script (its own folder, not the current one, is
first on the path) from a folder outside the checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

WRONG_PACKAGE = 3


class InstalledPackageOnly:
    """A pytest plugin: the tests must have imported `specbench_cli` from `expected`."""

    def __init__(self, expected: Path) -> None:
        self.expected = expected.resolve()

    def pytest_report_header(self) -> str:
        return f"specbench_cli expected from: {self.expected}"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        pkg = sys.modules.get("specbench_cli")
        where = Path(pkg.__file__).resolve().parent if pkg is not None and pkg.__file__ else None
        if where != self.expected:
            pytest.exit(f"the tests imported specbench_cli from {where}, not the installed package at "
                        f"{self.expected}", returncode=WRONG_PACKAGE)
        session.config.get_terminal_writer().line(f"specbench_cli imported from: {where}")


def main(argv: list[str]) -> int:
    if not argv:
        print("error: usage: installed_pytest.py PACKAGE_FOLDER [pytest arguments...]", file=sys.stderr)
        return 2
    return int(pytest.main(argv[1:], plugins=[InstalledPackageOnly(Path(argv[0]))]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
