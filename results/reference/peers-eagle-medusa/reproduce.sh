#!/usr/bin/env bash
# specbench's eagle / medusa vs the official eagle-llm (EAGLE-1) and medusa-llm (Medusa-1) packages.
# Run from anywhere inside a specbench checkout, in specbench's environment (`specbench` on PATH):
#
#   bash results/reference/peers-eagle-medusa/reproduce.sh
#
# Everything it makes (the peers' venv, distillation data, heads, run folders, JSON, the tables)
# goes to $WORK, outside the repository; a second call reuses the venv and the heads.
# Parameters (environment):
#   WORK            work folder                 default ${TMPDIR:-/tmp}/specbench-peers
#   THREADS         torch threads, both sides   default 2
#   ROUNDS          ours/theirs process pairs   default 2 (alternating: ours, theirs, ours, theirs)
#   MAX_NEW         new tokens per answer       default 128
#   PER_CATEGORY    Spec-Bench questions/cat.   default 2 (6 categories: 12 first turns)
#   MEDUSA_CHOICES  medusa-llm 0.1 dense tree   default 1,6,3,2 (3 heads; 60 nodes + root)
#   STEPS           head training steps         default 300
#   NICE            nice level                  default 0 (set 10 on a shared machine)
#   PEER_PYTHON     python for the peers' venv  default python3
#   TORCH_SPEC      torch for the peers' venv   default: the torch version of specbench's env
#   PEER_PIP_ARGS   extra pip arguments for the peers' torch (e.g. a CPU-only index)
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPO=$PWD
WORK=${WORK:-${TMPDIR:-/tmp}/specbench-peers}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
MAX_NEW=${MAX_NEW:-128}
PER_CATEGORY=${PER_CATEGORY:-2}
MEDUSA_CHOICES=${MEDUSA_CHOICES:-1,6,3,2}
STEPS=${STEPS:-300}
NICE=${NICE:-0}
PY=$(command -v python)
TORCH_SPEC=${TORCH_SPEC:-torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')}
HEADS_COUNT=$(( $(echo "$MEDUSA_CHOICES" | tr ',' '\n' | wc -l) - 1 ))
SCRIPT="$REPO/benchmarks/eagle_medusa_peers.py"
run() { nice -n "$NICE" "$@"; }
mkdir -p "$WORK"

# 1. the peers' environment: their pinned-era transformers, their packages without dependencies
VENV=$WORK/venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import eagle.model.ea_model, medusa.model.medusa_model' 2>/dev/null; then
  "${PEER_PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install -q $TORCH_SPEC ${PEER_PIP_ARGS:-}
  "$VENV/bin/pip" install -q --no-deps eagle-llm==1.2.1 medusa-llm==0.1
  # pip then lists their unmet requirements (fschat, accelerate, gradio, ...): not used on these paths
  "$VENV/bin/pip" install -q transformers==4.36.2
fi

# 2. heads: distill data (the target's greedy answers, vicuna prompts), train, write the
#    published layouts, import them back (skipped when already there)
HEADS=$WORK/heads
if [ ! -f "$HEADS/pub/check.json" ]; then
  [ -s "$WORK/data.jsonl" ] || run specbench train drafter distill-data --temperatures 0 --max-new-tokens 96 \
      --dtype bfloat16 --threads "$THREADS" --prompt-template vicuna -q -o "$WORK/data.jsonl"
  run specbench train heads --kind eagle --data "$WORK/data.jsonl" --target smollm2-135m \
      --out "$HEADS/eagle-train" --prompt-template vicuna --steps "$STEPS" --threads "$THREADS"
  run specbench train heads --kind medusa --heads-count "$HEADS_COUNT" --data "$WORK/data.jsonl" \
      --target smollm2-135m --out "$HEADS/medusa-train" --prompt-template vicuna --steps "$STEPS" --threads "$THREADS"
  run "$PY" "$SCRIPT" heads --eagle "$HEADS/eagle-train" --medusa "$HEADS/medusa-train" --out "$HEADS/pub"
fi

# 3. the prompts (ids as specbench run --prompt-template vicuna encodes them)
run "$PY" "$SCRIPT" prompts --per-category "$PER_CATEGORY" --out "$WORK/prompts.json"

# 4. alternating processes: ours (specbench run), theirs (the peers' generators)
COMMON=(--heads "$HEADS/pub" --prompts "$WORK/prompts.json" --threads "$THREADS" --max-new-tokens "$MAX_NEW"
        --medusa-choices "$MEDUSA_CHOICES")
rm -f "$WORK"/ours-*.json "$WORK"/theirs-*.json
for r in $(seq 1 "$ROUNDS"); do
  run "$PY" "$SCRIPT" ours "${COMMON[@]}" --out "$WORK/ours-$r.json"
  run "$VENV/bin/python" "$SCRIPT" theirs "${COMMON[@]}" --out "$WORK/theirs-$r.json"
done

# 5. tables
"$PY" "$SCRIPT" compare "$WORK"/ours-*.json "$WORK"/theirs-*.json --out "$WORK/compare.md"
echo "tables: $WORK/compare.md"
