#!/usr/bin/env bash
# MSN at small scale: self-distillation data, then SFT vs MSN from SmolLM2-135M-Instruct
# at equal budget (same data order, steps, lr, seed), then the noise-length ablation.
#   bash results/reference/msn/msn_train.sh data          # prompts + the target's own answers (time-capped)
#   bash results/reference/msn/msn_train.sh sft|msn4|msn1|msn8   # one training run (resumes if interrupted)
#   bash results/reference/msn/msn_train.sh eval NAME     # ar,jacobi,tr-jacobi,lookahead,pld at BC 10 (NAME=base: untouched;
#                                                METHODS=ar,lookahead,pld for a subset)
#   bash results/reference/msn/msn_train.sh quality NAME  # AR on the first LIMIT_Q (20) math_reasoning questions, 256 tokens (GSM8K)
#   bash results/reference/msn/msn_train.sh humaneval NAME  # AR on the first LIMIT_H (20) HumanEval problems, 256 tokens
#                                                (both: QIDS=id,id,... runs those questions instead)
#   bash results/reference/msn/msn_train.sh window NAME   # jacobi at BC 2,5,17 (window 1,4,16; 9 from eval: their Fig. 4)
#   bash results/reference/msn/msn_train.sh collect       # copy histories/plots into results/reference/msn-training
# DATA defaults to the self-distillation file (302 non-Spec-Bench
# prompts, greedy, max 160 tokens); `data` writes $root/data.jsonl instead.
# Weights and data live OUTSIDE the repo (MSN_ROOT, default results/checkpoints/msn); only small result
# files are copied into the repo. Everything runs at 1 thread: the machine is a shared 2-core CPU.
# FORWARD (default sdpa, what the first runs used) picks `specbench run --forward`; lean is faster and
# gives the same tokens in float32, so #MAT compares across the two.
set -euo pipefail
root=${MSN_ROOT:-results/checkpoints/msn}
data_seconds=${DATA_SECONDS:-1440}   # ~24 min of generation; rows are flushed per batch
data=${DATA:-results/checkpoints/heads/data/selfdistill.jsonl}
steps=${STEPS:-48}
batch=${BATCH:-8}
max_len=${MAX_LEN:-256}
lr=${LR:-5e-5}
warmup=${WARMUP:-5}
save_every=${SAVE_EVERY:-12}
questions=${SPECBENCH_QUESTIONS:-../shared/data/spec_bench/question.jsonl}
runs=${RUNS:-results/msn-runs}
forward=${FORWARD:-sdpa}
# THREADS (default 1) sets `eval`'s --threads (2 for the quiet-machine re-timing: RUNS=... THREADS=2 FORWARD=lean)
export OMP_NUM_THREADS=1
mkdir -p "$root"
here=$(cd "$(dirname "$0")/.." && pwd)
results="$here/results/reference/msn-training"

train() {  # train NAME COMMAND [noise options]
  local name=$1 cmd=$2; shift 2
  local resume=()
  local lora=()
  [ -d "$root/$name/checkpoints" ] && resume=(--resume)
  [ -n "${LORA_RANK:-}" ] && lora=(--lora-rank "$LORA_RANK")
  /usr/bin/time -v specbench train "$cmd" --data "$data" -o "$root/$name" \
    --steps "$steps" --batch-size "$batch" --max-len "$max_len" --lr "$lr" --warmup "$warmup" --seed 0 \
    --dtype "${DTYPE:-bfloat16}" --threads 1 --save-every "$save_every" "${resume[@]}" "${lora[@]}" "$@" \
    --quiet 2> "$root/$name.time.log"
}

case ${1:-} in
  data)
    cat "$here/specbench_cli/tasks/data/seed_instructions.jsonl" > "$root/prompts.jsonl"
    python -m specbench_cli.training.draft_model.synth_prompts -o "$root/synth.jsonl"
    cat "$root/synth.jsonl" >> "$root/prompts.jsonl"
    # Greedy answers for every prompt first, then sampled ones at T=0.7 while time lasts; the
    # file is appended batch by batch, so the time cap leaves a valid (shorter) dataset.
    timeout "$data_seconds" specbench train drafter distill-data -o "$root/data.jsonl" \
      --seeds "$root/prompts.jsonl" --temperatures 0,0.7 --max-new-tokens 128 --batch-size 16 \
      --threads 1 --quiet || [ $? -eq 124 ]
    wc -l "$root/data.jsonl" ;;
  sft) train sft sft ;;
  msn4) train msn4 msn --noise-length 4 ;;
  msn1) train msn1 msn --noise-length 1 ;;
  msn8) train msn8 msn --noise-length 8 ;;
  eval)
    name=${2:?eval needs a model name (base, sft, msn4, ...)}
    model="$root/$name"; [ "$name" = base ] && model=smollm2-135m
    specbench run --model "$model" --methods "${METHODS:-ar,jacobi,tr-jacobi,lookahead,pld}" --tasks spec_bench \
      --questions "$questions" --limit "${LIMIT:-1}" --bc 10 --max-new-tokens "${MAX_NEW:-64}" --threads "${THREADS:-1}" \
      --forward "$forward" --output-dir "$runs/$name" ;;
  quality|humaneval)
    name=${2:?$1 needs a model name (base, sft, msn4, ...)}
    model="$root/$name"; [ "$name" = base ] && model=smollm2-135m
    # AR only: lossless methods reproduce AR's tokens in float32, so their quality is AR's.
    # Same first-N questions for every model, so the scores pair up question by question.
    if [ "$1" = quality ]; then
      task=(--tasks spec_bench --questions "$questions" --categories math_reasoning --limit "${LIMIT_Q:-20}")
    else
      task=(--tasks humaneval --limit "${LIMIT_H:-20}")
    fi
    # QIDS=421,422,... : these questions instead (more questions later, as another run folder)
    [ -n "${QIDS:-}" ] && task=("${task[@]:0:${#task[@]}-2}" --question-ids "$QIDS")
    specbench run --model "$model" --methods ar "${task[@]}" --max-new-tokens 256 --threads 1 \
      --forward "$forward" --no-warmup --output-dir "$runs/$1-$name" ;;
  window)
    name=${2:?window needs a model name (sft, msn4, ...)}
    model="$root/$name"; [ "$name" = base ] && model=smollm2-135m
    # BC 10 (window 9) comes from `eval`; --no-warmup: only #MAT is read from these runs
    for bc in ${WINDOW_BCS:-2 5 17}; do
      specbench run --model "$model" --methods ar,jacobi --tasks spec_bench --questions "$questions" \
        --limit "${LIMIT:-1}" --bc "$bc" --max-new-tokens "${MAX_NEW:-64}" --threads 1 --no-report --no-warmup \
        --forward "$forward" \
        --output-dir "$runs/window-$name/bc$bc"
    done ;;
  collect)
    mkdir -p "$results"
    for d in "$root"/*/; do
      n=$(basename "$d")
      [ -f "$d/training.json" ] || continue
      mkdir -p "$results/$n"
      cp "$d/training.json" "$d/history.jsonl" "$d/loss_curve.png" "$results/$n/"
      [ -f "$root/$n.time.log" ] && grep -E "Elapsed|Maximum resident" "$root/$n.time.log" > "$results/$n/time.txt" || true
    done
    python - "$data" > "$results/data_summary.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
temps = {}
for r in rows:
    temps[str(r["temperature"])] = temps.get(str(r["temperature"]), 0) + 1
print(json.dumps({"rows": len(rows), "prompts": len({r["instruction"] for r in rows}),
                  "response_tokens": sum(r["response_tokens"] for r in rows),
                  "finished": sum(bool(r["finished"]) for r in rows), "by_temperature": temps}, indent=2))
EOF
    ;;
  *) sed -n 2,17p "$0"; exit 2 ;;
esac
