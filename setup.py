"""Package discovery for the mapped layout (the rest of the metadata is in pyproject.toml).

`specbench_cli/` holds the tool; `methods/` and `tasks/` (one file per method / suite) sit at
the top of the repository and install as `specbench_cli.methods` / `specbench_cli.tasks`
through `[tool.setuptools.package-dir]`. Every package under the three folders is found here.
"""

from setuptools import find_packages, setup

PACKAGES = find_packages(include=["specbench_cli", "specbench_cli.*"])
for folder in ("methods", "tasks"):
    PACKAGES += [f"specbench_cli.{name}" for name in find_packages(include=[folder, f"{folder}.*"])]

setup(packages=PACKAGES)
