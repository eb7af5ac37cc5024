#!/usr/bin/env bash
# decode Spec-Bench with trained heads (results/reference/heads/train_heads.sh) next to AR
# (and pld) in the same process, float32, one thread. One EAGLE and/or one Medusa head per call;
# both run in the same runs (one AR per run: the machine is slow, AR is the costliest method):
#   chain4     -- each head's greedy chain of 3 (-o KIND.chain=true, BC 4): KOALA's Table 1
#                 measurement (mean acceptance length and 1/2/3-alpha with chain drafts);
#   bc10, bc30 -- each head's tree (EAGLE-2 dynamic tree / Medusa static tree) and pld.
# Result folders: results/reference/heads/<tag>/<stage>/<run_id>/, report in <tag>/report/;
# tag = the names joined by '+'. A stage whose folder already holds a run is skipped.
#   usage: results/reference/heads/heads_eval.sh NAME [NAME] [--stages chain4,bc10,bc30]
#          e.g. results/reference/heads/heads_eval.sh eagle-k2-adv medusa-h3-k2-adv
#   env:   HEADS_OUT (default results/checkpoints/heads), LIMIT (1 question per category), MAX_NEW (64),
#          DTYPE (float32), FORWARD (sdpa; lean = the fused forward, docs/performance.md),
#          RES (results/reference/heads); the Spec-Bench questions come from
#          $SPECBENCH_QUESTIONS or ../shared/data/spec_bench/question.jsonl (README, "Where the questions come from")
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
OUT=${HEADS_OUT:-results/checkpoints/heads}
RES=${RES:-results/reference/heads}
STAGES=chain4,bc10,bc30
names=()
while [ $# -gt 0 ]; do
  case $1 in
    --stages) STAGES=$2; shift 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[ ${#names[@]} -gt 0 ] || { echo "usage: $0 NAME [NAME] [--stages chain4,bc10,bc30]" >&2; exit 2; }

kinds=() heads=() chain=()
for name in "${names[@]}"; do
  kind=${name%%-*}
  [ -f "$OUT/$name/config.json" ] || { echo "no heads at $OUT/$name (train them first)" >&2; exit 2; }
  [[ " ${kinds[*]} " == *" $kind "* ]] && { echo "one $kind head per call" >&2; exit 2; }
  kinds+=("$kind"); heads+=(-o "$kind.heads=$OUT/$name"); chain+=(-o "$kind.chain=true")
done
tag=$(IFS=+; echo "${names[*]}")
list=$(IFS=,; echo "${kinds[*]}")
for stage in ${STAGES//,/ }; do
  dir=$RES/$tag/$stage
  if compgen -G "$dir/*/samples.jsonl" >/dev/null; then echo "== $tag $stage: done"; continue; fi
  case $stage in
    bc10) args=(--methods "ar,pld,$list" --block-complexity 10) ;;
    bc30) args=(--methods "ar,pld,$list" --block-complexity 30) ;;
    chain4) args=(--methods "ar,$list" --block-complexity 4 "${chain[@]}") ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
  echo "== $tag $stage ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
  specbench run --tasks spec_bench --limit "${LIMIT:-1}" --max-new-tokens "${MAX_NEW:-64}" --threads 1 \
    --dtype "${DTYPE:-float32}" --forward "${FORWARD:-sdpa}" --output-dir "$dir" --no-report "${heads[@]}" "${args[@]}"
  echo "== $tag $stage finished ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
done
specbench report "$RES/$tag"/*/*/ --columns bc,alpha,agree -o "$RES/$tag/report" >/dev/null || true
