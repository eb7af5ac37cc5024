#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# Every training-free method at BC 10, 30 and 60 (float32, 2 threads), then the same at BC 10 in bfloat16.
OUT=${1:-results/bc-sweep}
uptime | tee "$OUT.uptime-start.txt" 2>/dev/null || true
bash results/reference/bc-sweep/bc_sweep.sh "$OUT" "${LIMIT:-3}" "${MAX_NEW:-128}"
specbench run --tasks spec_bench --limit "${LIMIT:-3}" --bc 10 --dtype bfloat16 --threads 2 \
  --methods ar,pld,jacobi,lookahead,tr-jacobi,mask-probe --output-dir "$OUT/bf16-bc10"
uptime
