#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# Every training-free method at its auto budget and at BC 10 in one run per dtype (2 threads, lean forward).
OUT=${1:-results/bc-auto}
THREADS=${THREADS:-2} FORWARD=${FORWARD:-lean} bash results/reference/bc-auto/bc_auto.sh "$OUT" "${LIMIT:-3}" "${MAX_NEW:-128}"
python results/reference/bc-auto/bc_auto_summary.py "$OUT"/float32/2* > "$OUT/summary-float32.md" || true
