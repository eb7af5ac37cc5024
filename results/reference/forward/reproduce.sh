#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# The forward per --forward flavour: one-forward timings, the device cost curve, AR and pld runs.
OUT=${1:-results/forward}
mkdir -p "$OUT"
for dtype in float32 bfloat16; do
  python results/reference/forward/forward_speed.py --dtype "$dtype" --threads 1 -o "$OUT/speed-$dtype-t1.json"
  specbench cost --dtype "$dtype" --threads 1 --forward lean --plot "$OUT/cost-$dtype-lean-t1.png"
done
bash results/reference/forward/forward_ar_runs.sh "$OUT/ar-runs" 2 sdpa short lean
bash results/reference/forward/forward_method_runs.sh "$OUT/pld-runs" ar,pld sdpa lean
python results/reference/forward/hidden_state_cost.py > "$OUT/hidden-state-cost.txt"
