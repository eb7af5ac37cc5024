#!/usr/bin/env bash
# The GPU check: losslessness on the device in float32 (required) and bfloat16 (recorded), a mini
# run of ar, pld, samd, suffix and medusa, and `specbench cost`, written to one folder. Uses the
# torch and transformers already installed (a GPU box may have no network):
#
#   bash benchmarks/gpu/check.sh [--device cuda] [--out gpu-check] [--quick] [--model REF]
#
# Where specbench is not installed yet, set WHEELHOUSE to a folder holding this project's wheel and
# the small wheels it needs beyond torch and transformers (benchmarks/gpu/wheelhouse.sh makes one on
# a machine with network): install.sh installs them with --no-deps --no-index. Under 10 minutes on
# one H100. CI runs it with `--device cpu --quick` in a new environment, both ways (WHEELHOUSE, and
# the wheel installed by hand), from the repository root, so it cannot rot.
#
# Every step runs against the INSTALLED package, never this checkout's source folder (which lacks
# `methods` and `tasks`): install.sh asks from an empty folder, check.py runs each command from
# one, and the tests must prove they imported the installed package (installed_pytest.py).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PKG="$(bash "$HERE/install.sh")"  # exits here (2) when specbench is not installed and no WHEELHOUSE
echo "specbench_cli: $PKG"
"${PYTHON:-python}" "$HERE/check.py" "$@"
