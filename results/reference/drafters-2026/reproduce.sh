#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# SPACE, PARD and DFlash trained here on SmolLM2-135M-Instruct next to EAGLE-3, Hydra and the best
# training-free method, on the same self-distillation data, then decoded on 18 Spec-Bench questions
# in float32 and bfloat16. Every stage resumes: re-running skips finished models and runs and
# continues interrupted ones. Timings depend on the machine and its load: run alone, and keep the
# uptime lines (printed at each stage, kept in the logs) next to the numbers.
#   usage: results/reference/drafters-2026/reproduce.sh [CHECKPOINTS] [stage...]
#          stages: data train eval quality table (default: all, in that order)
#   env:   THREADS (2), HEAD_STEPS (600), DFLASH_LONG_STEPS (3000), SPACE_STEPS (150), PARD_STEPS (400),
#          DTYPES ("float32 bfloat16")
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
CK=${1:-results/checkpoints/drafters-2026}
shift || true
STAGES=("${@:-data train eval quality table}")
STAGES=(${STAGES[*]})
HERE=results/reference/drafters-2026
THREADS=${THREADS:-2}
HEAD_STEPS=${HEAD_STEPS:-600}
DFLASH_LONG_STEPS=${DFLASH_LONG_STEPS:-3000}
SPACE_STEPS=${SPACE_STEPS:-150}
PARD_STEPS=${PARD_STEPS:-400}
DTYPES=${DTYPES:-float32 bfloat16}
DATA=$CK/data/selfdistill.jsonl
mkdir -p "$CK/data" "$HERE/training" "$HERE/runs"
say() { echo "== $* ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
has() { [[ " ${STAGES[*]} " == *" $1 "* ]]; }

if has data; then
  # The heads' prompt set (shipped seeds + templated instructions; none is a Spec-Bench turn),
  # answered greedily by the float32 target: 302 rows, up to 128 new tokens.
  if [ ! -f "$CK/data/done" ]; then
    say "data: self-distillation answers"
    python - "$CK/data/prompts.jsonl" <<'PY'
import json, sys
from specbench_cli.training.heads.data import heads_prompts
with open(sys.argv[1], "w") as f:
    for r in heads_prompts():
        f.write(json.dumps(r) + "\n")
PY
    start=$(date +%s)
    specbench train drafter distill-data --target smollm2-135m --seeds "$CK/data/prompts.jsonl" \
      --temperatures 0 --max-new-tokens 128 --batch-size 24 --threads "$THREADS" -q -o "$DATA"
    echo "{\"seconds\": $(( $(date +%s) - start ))}" > "$CK/data/done"
  fi
fi

keep_training() {  # name dir: copy the small training records into the study (table.py --scrub
                   # makes their paths relative)
  mkdir -p "$HERE/training/$1"
  for f in training.json history.json history.jsonl curves.png loss_curve.png; do
    [ -f "$2/$f" ] && cp "$2/$f" "$HERE/training/$1/"
  done
}

timed() {  # name marker command...: run once, record the wall time beside the model
  local name=$1 marker=$2; shift 2
  if [ -f "$marker" ]; then echo "== $name: done"; return; fi
  say "train $name"
  local start; start=$(date +%s)
  "$@"
  echo "{\"seconds\": $(( $(date +%s) - start )), \"load_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" > "$marker"
}

resume_flag() { [ -d "$1/checkpoints" ] && echo --resume || true; }

if has train; then
  [ -f "$CK/data/done" ] || { echo "no finished data in $CK/data: run the data stage first" >&2; exit 2; }
  H=(--data "$DATA" --target smollm2-135m --batch-size 4 --lr 1e-3 --autocast
     --threads "$THREADS" -q)
  # EAGLE-3 first: its feature cache (layers 2, 15, 27 + last state + top-1) is a superset the
  # other head kinds accept, so Hydra reads it instead of making its own.
  timed eagle3 "$CK/eagle3.time" specbench train heads --kind eagle3 --out "$CK/eagle3" --steps "$HEAD_STEPS" "${H[@]}" $(resume_flag "$CK/eagle3")
  keep_training eagle3 "$CK/eagle3"
  timed hydra "$CK/hydra.time" specbench train heads --kind hydra --heads-count 4 --layers 1 --out "$CK/hydra" \
    --features "$DATA.eagle3-features" --steps "$HEAD_STEPS" "${H[@]}" $(resume_flag "$CK/hydra")
  keep_training hydra "$CK/hydra"
  # DFlash at block size 10: the whole BC-10 budget as one block [bonus, 9 masks] (gamma 5, the paper's for 10).
  timed dflash "$CK/dflash.time" specbench train heads --kind dflash --layers 1 --block-size 10 --out "$CK/dflash" \
    --steps "$HEAD_STEPS" "${H[@]}" $(resume_flag "$CK/dflash")
  keep_training dflash "$CK/dflash"
  # The same DFlash recipe at about EAGLE-3's training wall time (its steps are ~5x cheaper).
  timed dflash-long "$CK/dflash-long.time" specbench train heads --kind dflash --layers 1 --block-size 10 \
    --out "$CK/dflash-long" --steps "$DFLASH_LONG_STEPS" "${H[@]}" $(resume_flag "$CK/dflash-long")
  keep_training dflash-long "$CK/dflash-long"
  # PARD: SmolLM2 has no smaller sibling, so the drafter is the target's first 4 layers (a subclone),
  # adapted with K = 9 (8 masks: BC 10's chain) and the paper's conditional drop (0.7, min 0.2).
  [ -f "$CK/subclone-L4/config.json" ] || specbench train drafter subclone --target smollm2-135m --layers 4 \
    --output "$CK/subclone-L4"
  timed pard "$CK/pard.time" specbench train pard --drafter "$CK/subclone-L4" --data "$DATA" -o "$CK/pard" \
    --k 9 --steps "$PARD_STEPS" --batch-size 4 --lr 5e-4 --max-len 320 --dtype bfloat16 \
    --threads "$THREADS" -q $(resume_flag "$CK/pard")
  keep_training pard "$CK/pard"
  # SPACE: the whole target fine-tuned (k = 3 masks, half the samples masked, lr 5e-5 as published).
  timed space "$CK/space.time" specbench train space --target smollm2-135m --data "$DATA" -o "$CK/space" \
    --k 3 --mask-prob 0.5 --steps "$SPACE_STEPS" --batch-size 4 --lr 5e-5 --max-len 320 --dtype bfloat16 \
    --threads "$THREADS" -q $(resume_flag "$CK/space")
  keep_training space "$CK/space"
  for n in eagle3 hydra dflash dflash-long pard space; do cp "$CK/$n.time" "$HERE/training/$n/wall.json"; done
  cp "$CK/data/done" "$HERE/training/data-wall.json"
fi

run_into() {  # folder, then run options: one run folder per (dtype, model), resumed when interrupted
  local out=$1; shift
  local prev; prev=$(ls -d "$out"/2*/ 2>/dev/null | tail -1 || true)
  if [ -n "$prev" ] && [ -f "$prev/report/table.md" ]; then echo "== $out: done"; return; fi
  say "run $out"
  if [ -n "$prev" ]; then specbench run --resume "$prev" --output-dir "$out" "$@"
  else specbench run --output-dir "$out" "$@"; fi
}

# 18 Spec-Bench questions (the first 3 of each category, 21 turns), 64 new tokens, BC 10, greedy.
SB=(--tasks spec_bench --limit 3 --max-new-tokens 64 --bc 10 --threads "$THREADS" --forward lean)
if has eval; then
  for dt in $DTYPES; do
    # The base target: AR, the best training-free method here (samd), and the four trained drafters.
    run_into "$HERE/runs/$dt/base" --methods ar,samd,eagle3,hydra,dflash,pard --dtype "$dt" "${SB[@]}" \
      -o eagle3.heads="$CK/eagle3" -o hydra.heads="$CK/hydra" -o dflash.heads="$CK/dflash" \
      --draft-model "$CK/pard"
    # DFlash at EAGLE-3's training wall time, with its own AR in the same run.
    run_into "$HERE/runs/$dt/dflash-long" --methods ar,dflash --dtype "$dt" "${SB[@]}" -o dflash.heads="$CK/dflash-long"
    # SPACE's own target: the fine-tuned model, with its own AR (the lossless baseline) and pld.
    run_into "$HERE/runs/$dt/space" --model "$CK/space" --methods ar,space,pld --dtype "$dt" "${SB[@]}"
  done
fi

if has quality; then
  # Answer quality of the SPACE model next to the base model: AR answers to the first 20
  # Spec-Bench math questions (GSM8K, scored against the reference), 192 new tokens, float32.
  Q=(--tasks spec_bench --categories math_reasoning --limit 20 --max-new-tokens 192 --methods ar
     --threads "$THREADS" --forward lean)
  run_into "$HERE/runs/quality/base" "${Q[@]}"
  run_into "$HERE/runs/quality/space" --model "$CK/space" "${Q[@]}"
fi

if has table; then
  python "$HERE/table.py" "$HERE" --checkpoints "$CK" --scrub > "$HERE/table.md"
fi
