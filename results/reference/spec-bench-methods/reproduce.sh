#!/usr/bin/env bash
# The rest of Spec-Bench's rows next to AR and pld on this machine: Token Recycling, SAM-decoding,
# REST, and Hydra / EAGLE-3 heads trained here. Steps (each skipped when its output exists, so the
# script resumes):
#   1. data: the target's own greedy answers to generated prompts (none a Spec-Bench question),
#      bfloat16 generation for a time budget (GEN_MINUTES); REST's datastore and the heads' training
#      data are these answers;
#   2. REST datastore, Hydra heads (Hydra++'s prefix-mlp, 4 heads; HYDRA_STEPS x 4 sequences) and an
#      EAGLE-3 head (EAGLE3_STEPS x 4 sequences, 7 training-time-test steps), 1 thread each;
#   3. one quiet 2-thread run per dtype: every method at BC 10 and at its `--bc auto` budget, in one
#      process, on the first 3 Spec-Bench questions of each category (18 questions, 128 new tokens).
# Run alone on the machine: the manifest records the load average and reports flag a busy run.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/spec-bench-methods}
DATA=$OUT/data
HEADS=$OUT/heads
mkdir -p "$DATA" "$HEADS"
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }

[ -s "$DATA/prompts.jsonl" ] || python -m specbench_cli.training.heads.prompts -o "$DATA/prompts.jsonl" -n 1500 --seed 1
if [ ! -f "$DATA/answers.done" ]; then
  stamp "generation (budget ${GEN_MINUTES:-18} min)"
  rc=0
  OMP_NUM_THREADS=1 timeout "${GEN_MINUTES:-18}m" specbench train drafter distill-data --target smollm2-135m \
    --seeds "$DATA/prompts.jsonl" --temperatures 0 --max-new-tokens 128 --batch-size 24 --dtype bfloat16 \
    --threads 1 -q -o "$DATA/answers.jsonl" || rc=$?
  [ $rc = 0 ] || [ $rc = 124 ] || exit $rc   # 124: the time budget ended it (rows are kept per batch)
  touch "$DATA/answers.done"
fi
stamp "data: $(wc -l < "$DATA/answers.jsonl") answers"
[ -d "$OUT/datastore" ] || specbench datastore build --from "$DATA/answers.jsonl" --out "$OUT/datastore"
train() {  # kind, steps, extra flags
  [ -f "$HEADS/$1/config.json" ] && return 0
  stamp "train $1"
  local again=(); [ -d "$HEADS/$1/checkpoints" ] && again=(--resume)
  specbench train heads "${again[@]}" --kind "$1" --steps "$2" "${@:3}" --data "$DATA/answers.jsonl" --target smollm2-135m \
    --features "$DATA/features-$1" --batch-size 4 --lr 1e-3 --autocast --threads 1 -q \
    --out "$HEADS/$1"
}
train hydra "${HYDRA_STEPS:-2000}" --heads-count 4
train eagle3 "${EAGLE3_STEPS:-800}"
stamp "runs"
for dtype in ${DTYPES:-float32 bfloat16}; do
  [ -d "$OUT/$dtype" ] && resume=(--resume "$(ls -d "$OUT/$dtype"/2*/ | tail -1)") || resume=()
  specbench run "${resume[@]}" --tasks spec_bench --limit "${LIMIT:-3}" --max-new-tokens "${MAX_NEW:-128}" --threads 2 \
    --dtype "$dtype" --bc 10 \
    --methods ar,pld,recycling,samd,rest,hydra,eagle3,pld@auto,recycling@auto,samd@auto,rest@auto,hydra@auto,eagle3@auto \
    -o "rest.datastore=$OUT/datastore" -o "hydra.heads=$HEADS/hydra" -o "eagle3.heads=$HEADS/eagle3" \
    --output-dir "$OUT/$dtype"
done
stamp done
