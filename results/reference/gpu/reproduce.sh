#!/usr/bin/env bash
# The GPU study (study.py, README.md) in one short window on one GPU, with the machine's own torch
# and transformers and no network:
#
#   bash results/reference/gpu/reproduce.sh --device cuda --out results/reference/gpu/<gpu name>
#   bash results/reference/gpu/reproduce.sh --device cpu --quick --out DIR     # what CI runs
#
# Where specbench is not installed, WHEELHOUSE names a folder of wheels to install first, as for
# benchmarks/gpu/check.sh (benchmarks/gpu/install.sh; benchmarks/gpu/wheelhouse.sh makes one).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PKG="$(bash "$HERE/../../../benchmarks/gpu/install.sh")"
echo "specbench_cli: $PKG"
"${PYTHON:-python}" "$HERE/study.py" "$@"
