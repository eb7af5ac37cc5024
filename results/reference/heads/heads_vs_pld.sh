#!/usr/bin/env bash
# the best trained heads against pld in ONE run per dtype (same questions, one AR),
# on a quiet machine with both cores: Spec-Bench, LIMIT questions per category (default 3), MAX_NEW
# new tokens (128), --threads 2, --forward lean (the default on this CPU), BC 10 and each method
# at its --block-complexity auto budget (pld@auto, eagle@auto, medusa@auto; calibrated on the
# suite's unreported questions, docs/block-complexity-auto.md).
#   usage: results/reference/heads/heads_vs_pld.sh EAGLE_NAME MEDUSA_NAME
#   env:   HEADS_OUT (results/checkpoints/heads), RES (results/reference/heads-vs-pld), DTYPES ("float32 bfloat16"),
#          LIMIT, MAX_NEW; questions from $SPECBENCH_QUESTIONS or ../shared/data/spec_bench/question.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 2 ] || { echo "usage: $0 EAGLE_NAME MEDUSA_NAME" >&2; exit 2; }
OUT=${HEADS_OUT:-results/checkpoints/heads}
RES=${RES:-results/reference/heads-vs-pld}
for d in "$OUT/$1" "$OUT/$2"; do [ -f "$d/config.json" ] || { echo "no heads at $d" >&2; exit 2; }; done
for dtype in ${DTYPES:-float32 bfloat16}; do
  dir=$RES/$dtype
  if compgen -G "$dir/*/samples.jsonl" >/dev/null; then echo "== $dtype: done"; continue; fi
  mkdir -p "$dir"
  uptime > "$dir/uptime-start.txt"
  specbench run --tasks spec_bench --limit "${LIMIT:-3}" --max-new-tokens "${MAX_NEW:-128}" --threads 2 \
    --dtype "$dtype" --forward lean --block-complexity 10 --output-dir "$dir" --no-report \
    --methods ar,pld,eagle,medusa,pld@auto,eagle@auto,medusa@auto -o "eagle.heads=$OUT/$1" -o "medusa.heads=$OUT/$2"
  uptime > "$dir/uptime-end.txt"
  specbench report "$dir"/*/ --columns bc,alpha,agree -o "$dir/report" >/dev/null
done
