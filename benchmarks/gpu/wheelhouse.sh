#!/usr/bin/env bash
# The wheelhouse of the offline GPU route (benchmarks/gpu/check.sh): this project's wheel and every
# wheel it and the GPU check's tests (pytest, hypothesis) need that a given environment lacks, so
# that `check.sh` can install them with `pip install --no-deps --no-index` on a machine without
# network, keeping that machine's own torch and transformers. Run it on a machine with network,
# with the Python of an environment set up like the GPU box's (the same torch, transformers and
# Python version):
#
#   bash benchmarks/gpu/wheelhouse.sh DEST [PYTHON]
#
# PYTHON defaults to `python`. With WHEEL set to an already built wheel of this project, that
# wheel is used instead of building one. What pip would install beside what is already there is
# read off `pip install --dry-run --report` (nothing is installed), then each of those is
# downloaded as a wheel with --no-deps.
set -euo pipefail
[ $# -ge 1 ] || { echo "error: usage: bash benchmarks/gpu/wheelhouse.sh DEST [PYTHON]" >&2; exit 2; }
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$1"
DEST="$(cd "$1" && pwd)"
PY="${2:-python}"
if [ -n "${WHEEL:-}" ]; then
  cp "$WHEEL" "$DEST/"
else
  "$PY" -m pip wheel -q --no-deps -w "$DEST" "$REPO"
fi
WHL="$(ls "$DEST"/specbench_cli-*.whl | tail -n 1)"
REPORT="$(mktemp "${TMPDIR:-/tmp}/specbench-wheelhouse.XXXXXX")"
trap 'rm -f "$REPORT"' EXIT
"$PY" -m pip install -q --dry-run --report "$REPORT" "$WHL" pytest hypothesis
# name==version of every distribution the dry run would install, this project's wheel excepted
mapfile -t NEED < <("$PY" - "$REPORT" <<'EOF'
import json, sys
for item in json.load(open(sys.argv[1], encoding="utf-8"))["install"]:
    meta = item["metadata"]
    if meta["name"].lower().replace("_", "-") != "specbench-cli":
        print(f"{meta['name']}=={meta['version']}")
EOF
)
if [ ${#NEED[@]} -gt 0 ]; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DEST" "${NEED[@]}"
fi
echo "wheelhouse $DEST: $(ls "$DEST"/*.whl | wc -l) wheels (this project's and ${#NEED[@]} it needs beside $PY's own)"
