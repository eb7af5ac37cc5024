#!/usr/bin/env bash
# The measurement: every training-free method at `auto` and at BC 10 side by side in
# ONE run per dtype (instances NAME@auto next to NAME at --bc 10, one AR baseline), Spec-Bench
# questions (first LIMIT per category), SmolLM2-135M, float32 and bfloat16.
# THREADS (default 1) and FORWARD (default sdpa) choose torch threads and `--forward` for the whole run;
# AUTO_TOKENS sets --auto-tokens (new tokens per calibration question).
#   bash results/reference/bc-auto/bc_auto.sh [OUT_DIR] [LIMIT] [MAX_NEW] [CANDIDATES] [CAL_QUESTIONS]
# Record `uptime` next to the numbers: wall-clock speedups are noisy on a shared machine.
set -euo pipefail
out=${1:-results/reference/bc-auto}
limit=${2:-1}
max_new=${3:-128}
candidates=${4:-1,2,3,4,6,8,12,16}
cal=${5:-6}
methods=ar
for m in pld jacobi lookahead tr-jacobi mask-probe; do methods="$methods,$m,$m@auto"; done
for dtype in ${DTYPES:-float32 bfloat16}; do
  uptime | tee "$out/uptime-$dtype-start.txt" 2>/dev/null || { mkdir -p "$out"; uptime > "$out/uptime-$dtype-start.txt"; }
  specbench run --tasks spec_bench --limit "$limit" --max-new-tokens "$max_new" --threads "${THREADS:-1}" --forward "${FORWARD:-sdpa}" --dtype "$dtype" \
    ${SPECBENCH_QUESTIONS:+--questions "$SPECBENCH_QUESTIONS"} --methods "$methods" --block-complexity 10 --auto-candidates "$candidates" --auto-questions "$cal" ${AUTO_TOKENS:+--auto-tokens "$AUTO_TOKENS"} \
    --output-dir "$out/$dtype" --no-report
  uptime > "$out/uptime-$dtype-end.txt"
  specbench report "$out/$dtype"/2* --columns bc,median,agree -o "$out/$dtype/report"
done
