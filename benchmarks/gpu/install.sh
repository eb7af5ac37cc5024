#!/usr/bin/env bash
# Make sure specbench is installed for PYTHON (default `python`), the way the GPU route needs it:
# where it is not, install WHEELHOUSE's wheels (this project's and the small ones it needs beside
# torch and transformers; benchmarks/gpu/wheelhouse.sh makes such a folder) with --no-deps
# --no-index, so the machine's own torch and transformers stay as they are and no network is used.
# Prints the installed package's folder. Used by check.sh and results/reference/gpu/reproduce.sh.
#
# Whether it is installed is asked from an empty folder, and asked for `specbench_cli.methods` and
# `specbench_cli.tasks`: Python puts the current folder first on its path, and from the repository
# root it would find this checkout's source folder `specbench_cli/`, which lacks both (only an
# install maps them in), and take it for the installed package.
set -euo pipefail
PY="${PYTHON:-python}"
NEUTRAL="$(mktemp -d "${TMPDIR:-/tmp}/specbench-install.XXXXXX")"
trap 'rm -rf "$NEUTRAL"' EXIT

installed() {  # the importable specbench_cli's folder, asked from an empty folder; fails when not installed
  (cd "$NEUTRAL" && "$PY" -c 'import specbench_cli.methods, specbench_cli.tasks, specbench_cli as p, os; print(os.path.dirname(p.__file__))') 2>/dev/null
}

if ! installed >/dev/null; then
  if [ -z "${WHEELHOUSE:-}" ]; then
    echo "error: specbench is not installed for $PY: pip install --no-deps the built wheel, or set WHEELHOUSE" \
         "to a folder of wheels (benchmarks/gpu/wheelhouse.sh)" >&2
    exit 2
  fi
  WHEELS="$(cd "$WHEELHOUSE" 2>/dev/null && pwd)" || { echo "error: WHEELHOUSE is not a folder: $WHEELHOUSE" >&2; exit 2; }
  compgen -G "$WHEELS/specbench_cli-*.whl" >/dev/null \
    || { echo "error: WHEELHOUSE holds no specbench_cli wheel: $WHEELS" >&2; exit 2; }
  echo "installing specbench from $WHEELS (--no-deps --no-index: torch and transformers stay as they are)" >&2
  (cd "$NEUTRAL" && "$PY" -m pip install -q --no-deps --no-index "$WHEELS"/*.whl)
  installed >/dev/null || { echo "error: specbench_cli.methods is still not importable after installing $WHEELS" >&2; exit 1; }
fi
installed
