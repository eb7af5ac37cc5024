#!/usr/bin/env bash
# The CPU baseline side by side, on the same float32 weights of the embedded model:
#   hf        specbench's own forward (`auto`: the native forward): ar, pld, samd, suffix at BC 10
#   hf-lean   the same on the lean forward (torch's kernels), the default before the native one
#   lc-f32    --target llama.cpp on a float32 GGUF of the same weights: the same methods
#   native-f32  llama.cpp's own: llama.cpp:ar and llama.cpp:ngram-mod on that GGUF
# then the cost curves t(q) of the hf forwards and the llama.cpp target, where the native step's
# time goes (roofline/native_profile.py), the products' floor for t(10)/t(1) on this machine
# (roofline/overlap.c, needs a C compiler), and each target's and engine's AR against this
# machine's bandwidth floor (the engines study's analyze.py).
# Questions: the first 2 Spec-Bench questions of each category (12 questions, 14 turns), 64 new
# tokens, greedy, 2 threads.
#   ISA=avx2 bash reproduce.sh   runs torch, MKL, oneDNN and the native library with AVX2 kernels
#                                only (on an AVX-512 machine: the AVX2 case, emulated)
# Needs llama.cpp built (tools/build-llama-cpp.sh). Run alone on the machine: any other process
# distorts a 2-thread timing.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
if [ "${ISA:-}" = "avx2" ]; then
  export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
fi
LABEL=${ISA:-$(grep -q avx512f /proc/cpuinfo && echo avx512 || echo avx2)}
OUT=${1:-results/cpu-baseline/$LABEL}
mkdir -p "$OUT"
COMMON=(--tasks spec_bench --limit "${LIMIT:-2}" --max-new-tokens "${TOKENS:-64}" --threads 2 --dtype float32 --bc 10
        --engine-timeout 900)
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
last_run() { ls -d "$1"/2*/ 2>/dev/null | tail -1 || true; }
run() {  # NAME ARGS...: skipped when its report exists, resumed when interrupted
  local name=$1 r; shift
  r=$(last_run "$OUT/$name")
  if [ -n "$r" ] && [ -f "$r/report/table.md" ]; then return; fi
  stamp "$name"
  # shellcheck disable=SC2046
  specbench run $([ -n "$r" ] && echo "--resume $r") "${COMMON[@]}" --output-dir "$OUT/$name" "$@"
}
F32="results/cpu-baseline/smollm2-135m-f32.gguf"
if [ ! -f "$F32" ]; then
  python results/reference/engines/f32_gguf.py \
    "$(python -c 'from specbench_cli.models.load import locate_alias; print(locate_alias("smollm2-135m"))')" "$F32.part"
  mv "$F32.part" "$F32"
fi
python -c "import torch; print('torch CPU capability:', torch.backends.cpu.get_cpu_capability())" | tee "$OUT/isa.txt"
grep -o 'avx512[a-z_]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ' >> "$OUT/isa.txt"; echo >> "$OUT/isa.txt"

run hf --methods ar,pld,samd,suffix
run hf-lean --forward lean --methods ar,pld,samd,suffix
run lc-f32 --target llama.cpp --model "$F32" --methods ar,pld,samd,suffix
run native-f32 --model "$F32" --methods ar,llama.cpp:ar,llama.cpp:ngram-mod
for f in native lean; do
  [ -f "$OUT/cost-$f.json" ] || { stamp "cost $f"; specbench cost --forward "$f" --threads 2 --max-q 16 --repeats 15 --refresh --json "$OUT/cost-$f.json" | tee "$OUT/cost-$f.txt"; }
done
[ -f "$OUT/cost-llama.cpp.json" ] || { stamp "cost llama.cpp"; specbench cost --target llama.cpp --model "$F32" --threads 2 --max-q 16 --refresh --json "$OUT/cost-llama.cpp.json" | tee "$OUT/cost-llama.cpp.txt"; }
stamp "native profile"
python results/reference/roofline/native_profile.py "$OUT/native-profile.json" > "$OUT/native-profile.md"
# the products' floor for t(10)/t(1): the weight stream with q multiply-adds a vector (overlap.c)
if command -v "${CC:-cc}" > /dev/null; then
  stamp "overlap"
  if [ "${ISA:-}" = "avx2" ] || ! grep -q avx512f /proc/cpuinfo; then V=(-mavx2 -mfma -DVBYTES=32); else V=(-mavx512f -DVBYTES=64); fi
  "${CC:-cc}" -O3 -fopenmp "${V[@]}" results/reference/roofline/overlap.c -o "$OUT/overlap.bin"
  OMP_NUM_THREADS=2 "$OUT/overlap.bin" | tee "$OUT/overlap.txt"
  rm -f "$OUT/overlap.bin"
fi
stamp "analysis"
python results/reference/engines/analyze.py "$OUT"
stamp "done"
