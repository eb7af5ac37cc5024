#!/usr/bin/env bash
# specbench's recycling / samd / ar vs Spec-Bench's own Token Recycling, SAMD and vanilla AR code.
# Run from anywhere inside a specbench checkout, in specbench's environment (`specbench` on PATH):
#
#   bash results/reference/peers-spec-bench/reproduce.sh
#
# Everything it makes (a clone of Spec-Bench at the pinned commit, its venv, run folders, JSON,
# the tables) goes to $WORK, outside the repository; a second call reuses the clone and the venv.
# Parameters (environment):
#   WORK             work folder                      default ${TMPDIR:-/tmp}/specbench-peers-spec-bench
#   THREADS          torch threads, both sides        default 2
#   ROUNDS           ours/theirs process pairs        default 2 (alternating: ours, theirs, ours, theirs)
#   MAX_NEW          new tokens per answer            default 128
#   PER_CATEGORY     Spec-Bench questions/category    default 3 (6 categories: 18 first turns)
#   QUESTION_IDS     only these questions (comma-separated; a quick check)
#   NICE             nice level                       default 0 (set 10 on a shared machine)
#   SPEC_BENCH_URL   where to clone Spec-Bench from   default its public GitHub repository
#   PEER_PYTHON      python for the peer venv         default python3
#   TORCH_SPEC       torch for the peer venv          default: the torch version of specbench's env
#   PEER_PIP_ARGS    extra pip arguments for the peer torch (e.g. a CPU-only index)
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPO=$PWD
WORK=${WORK:-${TMPDIR:-/tmp}/specbench-peers-spec-bench}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
MAX_NEW=${MAX_NEW:-128}
PER_CATEGORY=${PER_CATEGORY:-3}
NICE=${NICE:-0}
SPEC_BENCH_URL=${SPEC_BENCH_URL:-https://github.com/hemingkx/Spec-Bench.git}
SPEC_BENCH_COMMIT=fd2c1cd7d2201ef71db4c5f4e455008f017967bf   # = SPEC_BENCH_COMMIT in the script
PY=$(command -v python)
TORCH_SPEC=${TORCH_SPEC:-torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')}
SCRIPT="$REPO/benchmarks/spec_bench_peers.py"
run() { nice -n "$NICE" "$@"; }
mkdir -p "$WORK"

# 1. Spec-Bench's code: a clone at the pinned commit (never copied into this repository)
SB=$WORK/Spec-Bench
if [ "$(git -C "$SB" rev-parse HEAD 2>/dev/null)" != "$SPEC_BENCH_COMMIT" ]; then
  rm -rf "$SB"
  git clone -q "$SPEC_BENCH_URL" "$SB"
  git -C "$SB" -c advice.detachedHead=false checkout -q "$SPEC_BENCH_COMMIT"
fi

# 2. its environment: the pins of its requirements.txt that its code paths here import
#    (transformers, accelerate, fschat, openai, anthropic, datasets); not gradio (web UI),
#    maturin (REST's Rust build), sentencepiece / protobuf (Llama's slow tokenizer). fschat
#    without its server dependencies; numpy < 2 as in the pins' time, and pyarrow < 20 (newer
#    releases need numpy 2).
VENV=$WORK/venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c \
    'import transformers, fastchat, datasets, openai, anthropic; assert transformers.__version__ == "4.37.1"' 2>/dev/null; then
  "${PEER_PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install -q $TORCH_SPEC ${PEER_PIP_ARGS:-}
  "$VENV/bin/pip" install -q transformers==4.37.1 accelerate==0.21.0 openai==0.28.0 anthropic==0.5.0 \
      datasets==3.4.1 "numpy<2" "pyarrow<20" shortuuid psutil requests tqdm
  "$VENV/bin/pip" install -q --no-deps fschat==0.2.31
fi

# 3. the prompts (chat-template ids as specbench run encodes them) and a first-turn questions file
run "$PY" "$SCRIPT" prompts --per-category "$PER_CATEGORY" ${QUESTION_IDS:+--question-ids "$QUESTION_IDS"} \
    --out "$WORK/prompts.json"

# 4. alternating processes: ours (specbench run), theirs (Spec-Bench's forward functions)
COMMON=(--prompts "$WORK/prompts.json" --threads "$THREADS" --max-new-tokens "$MAX_NEW")
rm -f "$WORK"/ours-*.json "$WORK"/theirs-*.json
for r in $(seq 1 "$ROUNDS"); do
  run "$PY" "$SCRIPT" ours "${COMMON[@]}" --out "$WORK/ours-$r.json"
  run "$VENV/bin/python" -B "$SCRIPT" theirs --spec-bench "$SB" "${COMMON[@]}" \
      --out "$WORK/theirs-$r.json"
done
# their files are as cloned: the patches live in memory only
if [ -n "$(git -C "$SB" status --porcelain)" ]; then
  echo "warning: the Spec-Bench clone has changes:" >&2
  git -C "$SB" status --short >&2
fi

# 5. tables
"$PY" "$SCRIPT" compare "$WORK"/ours-*.json "$WORK"/theirs-*.json --out "$WORK/compare.md"
echo "tables: $WORK/compare.md"
