#!/usr/bin/env bash
# The measurement: every training-free method at block complexity 10, 30 and 60 on a
# fixed Spec-Bench subset (first LIMIT questions per category), SmolLM2-135M, float32, 2 threads.
#   bash results/reference/bc-sweep/bc_sweep.sh [OUT_DIR] [LIMIT] [MAX_NEW]
set -euo pipefail
out=${1:-results/reference/bc-sweep}
limit=${2:-2}
max_new=${3:-128}
for bc in 10 30 60; do
  specbench run --tasks spec_bench --limit "$limit" --max-new-tokens "$max_new" --threads 2 \
    --methods ar,pld,jacobi,lookahead,tr-jacobi,mask-probe --block-complexity "$bc" \
    --output-dir "$out/bc$bc" --no-report
done
specbench report "$out"/bc*/* --columns bc,median,agree -o "$out/report"
