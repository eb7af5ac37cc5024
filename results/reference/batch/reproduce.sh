#!/usr/bin/env bash
# Speedup against batch size: AR, pld, samd, tr-jacobi and a head method (hydra) at batch sizes
# 1, 2, 4, 8, 16, each at BC 10 and at its `--bc auto` budget for that batch size, against AR at
# the same batch size. float32, 2 threads, the first 3 Spec-Bench questions of each category
# (18 questions, 128 new tokens, greedy), the default forward (lean on a CPU).
#   1. per N: the cost curve t(N, q), q = 1..24 (what `auto` chooses from), as JSON and a plot;
#   2. per N: one run (every method of the list, AR first in every batch), resumed if half done;
#   3. one report over the five runs: the batch table (batch.md) and speedup_vs_batch_size.png.
# Needs trained Hydra heads (HEADS, default: where results/reference/spec-bench-methods/reproduce.sh
# trains them). Run alone on the machine: manifests record the load average; reports flag a busy run.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/batch}
HEADS=${HEADS:-results/spec-bench-methods/heads/hydra}
SIZES=${SIZES:-1 2 4 8 16}
LIMIT=${LIMIT:-3}
MAX_NEW=${MAX_NEW:-128}
[ -f "$HEADS/config.json" ] || { echo "no Hydra heads at $HEADS: train them with results/reference/spec-bench-methods/reproduce.sh, or set HEADS" >&2; exit 2; }
mkdir -p "$OUT/cost" "$OUT/runs"
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }

for n in $SIZES; do
  if [ ! -s "$OUT/cost/n$n.json" ]; then
    stamp "cost curve t($n, q)"
    specbench cost --dtype float32 --threads 2 --batch-size "$n" --max-q 24 --json "$OUT/cost/n$n.json" \
      --plot "$OUT/cost/n$n.png"
  fi
done

for n in $SIZES; do
  dir=$OUT/runs/n$n
  last=$(ls -d "$dir"/2*/ 2>/dev/null | tail -1 || true)
  if [ -n "$last" ] && grep -q '"finished": "' "$last/manifest.json"; then continue; fi
  [ -n "$last" ] && resume=(--resume "$last") || resume=()
  stamp "runs at batch size $n"
  specbench run "${resume[@]}" --tasks spec_bench --limit "$LIMIT" --max-new-tokens "$MAX_NEW" --threads 2 \
    --dtype float32 --bc 10 --batch-size "$n" \
    --methods ar,pld,samd,tr-jacobi,hydra,pld@auto,samd@auto,tr-jacobi@auto,hydra@auto \
    -o "hydra.heads=$HEADS" --output-dir "$dir" --no-report
done

stamp report
runs=()
for n in $SIZES; do runs+=("$(ls -d "$OUT/runs/n$n"/2*/ | tail -1)"); done
specbench report "${runs[@]}" -o "$OUT/report"
stamp done
