#!/usr/bin/env bash
# Token Recycling and SAM-decoding against pld and AR: one quiet 2-thread run per dtype, every
# method at BC 10 and at its `--bc auto` budget in the same process, the first 3 Spec-Bench
# questions of each category (18 questions, 128 new tokens), the default forward (lean on CPU).
# Run alone on the machine: the manifest records the load average and reports flag a busy run.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/recycling-samd}
for dtype in ${DTYPES:-float32 bfloat16}; do
  specbench run --tasks spec_bench --limit "${LIMIT:-3}" --max-new-tokens "${MAX_NEW:-128}" --threads 2 \
    --dtype "$dtype" --bc 10 --methods ar,pld,recycling,samd,pld@auto,recycling@auto,samd@auto \
    --output-dir "$OUT/$dtype"
done
