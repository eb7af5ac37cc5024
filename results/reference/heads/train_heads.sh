#!/usr/bin/env bash
# Long run: self-distillation data for the embedded model, then draft heads at equal
# budget (same data, steps, batch and lr): KOALA's Table 1 grid, EAGLE and Medusa (H=3) with
# K = 1, 2, 3 layers, each plain and adversarial (lambda 0.1, discriminator layers = K).
# Checkpoints go to $HEADS_OUT (default results/checkpoints/heads, never the repo); the small histories, curves
# and training.json files are copied to results/reference/heads-training/<name>/.
# Every stage resumes: re-running the script skips finished heads and continues interrupted ones.
#   usage: results/reference/heads/train_heads.sh [names...]     (default: all, in the order below)
#          a name may end in -v2 (train on $HEADS_OUT/data/v2.features, results/reference/heads/heads_data_v2.sh)
#          and then in -sN (N steps instead of $STEPS), e.g. eagle-k1-v2 or eagle-k1-v2-s1200
#   env:   HEADS_OUT, STEPS (default 400), BATCH (default 4), GEN_MAX_NEW (160), SKIP_GEN=1,
#          AUTOCAST (1: bfloat16 autocast of the training step, ~2.5x faster here; 0: float32)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
OUT=${HEADS_OUT:-results/checkpoints/heads}
RES=results/reference/heads-training
STEPS=${STEPS:-400}
BATCH=${BATCH:-4}
DATA=$OUT/data/selfdistill.jsonl
mkdir -p "$OUT/data" "$RES"

if [ "${SKIP_GEN:-0}" != 1 ]; then
  python - "$OUT/data/prompts.jsonl" <<'PY'
import json, sys
from specbench_cli.training.heads.data import heads_prompts
with open(sys.argv[1], "w") as f:
    for r in heads_prompts():
        f.write(json.dumps(r) + "\n")
PY
  specbench train drafter distill-data --target smollm2-135m --seeds "$OUT/data/prompts.jsonl" \
    --temperatures 0 --max-new-tokens "${GEN_MAX_NEW:-160}" --batch-size 24 --threads 1 -q -o "$DATA"
fi

train() {  # name, data, steps, then `train heads` options
  local name=$1 data=$2 steps=$3; shift 3
  local dir=$OUT/$name resume=()
  if [ -f "$dir/training.json" ]; then echo "== $name: done"; else
    [ -d "$dir/checkpoints" ] && resume=(--resume)
    echo "== $name: $* ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
    amp=(); [ "${AUTOCAST:-1}" = 1 ] && amp=(--autocast)
    specbench train heads --data "$data" --out "$dir" --steps "$steps" --batch-size "$BATCH" \
      --threads 1 -q "${resume[@]}" "${amp[@]}" "$@"
  fi
  mkdir -p "$RES/$name"
  cp "$dir/history.json" "$dir/training.json" "$dir/curves.png" "$RES/$name/"
}

ALL=(eagle-k1 eagle-k1-adv eagle-k2 eagle-k2-adv eagle-k3 eagle-k3-adv
     medusa-h3-k1 medusa-h3-k1-adv medusa-h3-k2 medusa-h3-k2-adv medusa-h3-k3 medusa-h3-k3-adv)
for name in "${@:-${ALL[@]}}"; do
  [[ $name =~ ^(eagle|medusa-h3)-k([123])(-adv)?(-v2)?(-s([0-9]+))?$ ]] || { echo "unknown head run $name" >&2; exit 2; }
  kind=${BASH_REMATCH[1]%-h3} k=${BASH_REMATCH[2]} args=() data=$DATA steps=${BASH_REMATCH[6]:-$STEPS}
  [ "$kind" = medusa ] && args+=(--heads-count 3)
  [ -n "${BASH_REMATCH[3]}" ] && args+=(--adversarial --lambda 0.1 --disc-layers "$k")
  if [ -n "${BASH_REMATCH[4]}" ]; then
    data=$OUT/data/v2.features
    [ -f "$data/features.json" ] || { echo "no $data: run results/reference/heads/heads_data_v2.sh first" >&2; exit 2; }
  fi
  train "$name" "$data" "$steps" --kind "$kind" --layers "$k" --lr 1e-3 "${args[@]}"
done
