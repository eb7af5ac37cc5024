#!/usr/bin/env bash
# Issue 11, items 5-6: decode Spec-Bench with each trained head (benchmarks/train_heads.sh) next
# to AR and pld in the same process, float32, one thread:
#   bc10, bc30 -- the head's tree (EAGLE-2 dynamic tree / Medusa static tree), methods ar,pld,HEAD;
#   chain4     -- the head's greedy chain of 3 (-o KIND.chain=true, BC 4): KOALA's 1/2/3-alpha.
# Result folders: results/reference/heads/<name>/<stage>/<run_id>/, report in <name>/report/.
# A stage whose folder already holds a run is skipped (delete it to measure again).
#   usage: benchmarks/heads_eval.sh NAME... [--stages bc10,chain4,bc30]
#   env:   HEADS_OUT (default /work/heads_ckpt), LIMIT (1 question per category), MAX_NEW (64),
#          DTYPE (float32), RES (results/reference/heads); the Spec-Bench questions come from
#          $SPECBENCH_QUESTIONS or ../shared/data/spec_bench/question.jsonl (README, "Where the questions come from")
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
OUT=${HEADS_OUT:-/work/heads_ckpt}
RES=${RES:-results/reference/heads}
STAGES=bc10,chain4,bc30
names=()
while [ $# -gt 0 ]; do
  case $1 in
    --stages) STAGES=$2; shift 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[ ${#names[@]} -gt 0 ] || { echo "usage: $0 NAME... [--stages bc10,chain4,bc30]" >&2; exit 2; }

for name in "${names[@]}"; do
  kind=${name%%-*}
  [ -f "$OUT/$name/config.json" ] || { echo "no heads at $OUT/$name (train them first)" >&2; exit 2; }
  for stage in ${STAGES//,/ }; do
    dir=$RES/$name/$stage
    if compgen -G "$dir/*/samples.jsonl" >/dev/null; then echo "== $name $stage: done"; continue; fi
    case $stage in
      bc10) args=(--methods "ar,pld,$kind" --block-complexity 10) ;;
      bc30) args=(--methods "ar,pld,$kind" --block-complexity 30) ;;
      chain4) args=(--methods "ar,$kind" --block-complexity 4 -o "$kind.chain=true") ;;
      *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
    echo "== $name $stage ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
    specbench run --tasks spec_bench --limit "${LIMIT:-1}" --max-new-tokens "${MAX_NEW:-64}" --threads 1 \
      --dtype "${DTYPE:-float32}" --heads "$OUT/$name" --output-dir "$dir" --no-report "${args[@]}"
  done
  specbench report "$RES/$name"/*/*/ --columns bc,alpha,agree -o "$RES/$name/report" >/dev/null || true
done
