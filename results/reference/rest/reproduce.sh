#!/usr/bin/env bash
# REST against pld and AR: a datastore of the target's own greedy answers to the shipped seed
# instructions (none is a Spec-Bench question), then one quiet 2-thread float32 run on the first 3
# Spec-Bench questions of each category (18 questions, 128 new tokens), AR, pld and rest at BC 10
# and at their `--bc auto` budgets in one process. Needs `pip install 'specbench-cli[rest]'`.
# Run alone on the machine: the manifest records the load average and reports flag a busy run.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/rest}
mkdir -p "$OUT"
[ -s "$OUT/answers.jsonl" ] || specbench train drafter distill-data --temperatures 0 \
  --max-new-tokens 128 --threads 2 -q -o "$OUT/answers.jsonl"
[ -d "$OUT/datastore" ] || specbench datastore build --from "$OUT/answers.jsonl" --out "$OUT/datastore"
specbench run --tasks spec_bench --limit "${LIMIT:-3}" --max-new-tokens "${MAX_NEW:-128}" --threads 2 \
  --dtype float32 --bc 10 --methods ar,pld,rest,pld@auto,rest@auto -o "rest.datastore=$OUT/datastore" \
  --output-dir "$OUT/float32"
