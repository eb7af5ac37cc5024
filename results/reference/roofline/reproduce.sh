#!/usr/bin/env bash
# The verify forward against this machine's floor, and what it changes for the methods.
# Run on a quiet machine (nothing else on the cores: every number here is a 2-thread timing).
#
#   bash results/reference/roofline/reproduce.sh [OUT]     (default OUT: results/reference/roofline/<isa>)
#
# 1. cost curves t(q), q = 1..128, float32, 2 threads, with the floor: the kernel plan timed on this
#    CPU (`--kernels auto`), the previous fixed choice (`onednn-t`: oneDNN on [in, out] weights for
#    every block), and transformers' own forward (`--forward sdpa`); bfloat16 with its plan;
# 2. the 18 Spec-Bench questions (3 per category), 128 new tokens, BC 10, every training-free lossless
#    method, in one process per kernel choice (auto, then onednn-t), and samd/pld at --bc auto.
# Everything is recorded with the CPU's instruction-set flags; compare numbers only within one machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ISA=$(python3 -c "from specbench_cli.targets.hf.forward.cpuinfo import cpu_flags, isa_label; print(isa_label(cpu_flags()).replace('+', '-').lower())")
OUT="${1:-results/reference/roofline/$ISA}"
mkdir -p "$OUT/runs"
grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u > "$OUT/cpu-flags.txt" || true
grep -m1 'model name' /proc/cpuinfo > "$OUT/cpu-model.txt" || true
uptime > "$OUT/load-before.txt"

for K in auto onednn-t; do
  specbench cost --dtype float32 --threads 2 --max-q 128 --repeats 3 --kernels "$K" --refresh \
    --plot "$OUT/cost-float32-lean-$K.png" --json "$OUT/cost-float32-lean-$K.json" > "$OUT/cost-float32-lean-$K.txt"
done
specbench cost --dtype float32 --threads 2 --max-q 128 --repeats 3 --forward sdpa --refresh \
  --plot "$OUT/cost-float32-sdpa.png" --json "$OUT/cost-float32-sdpa.json" > "$OUT/cost-float32-sdpa.txt"
specbench cost --dtype bfloat16 --threads 2 --max-q 64 --repeats 3 --kernels auto --refresh \
  --plot "$OUT/cost-bfloat16-lean-auto.png" --json "$OUT/cost-bfloat16-lean-auto.json" > "$OUT/cost-bfloat16-lean-auto.txt"

METHODS=ar,pld,jacobi,lookahead,tr-jacobi,mask-probe,recycling,samd
for K in auto onednn-t; do
  specbench run --tasks spec_bench --limit 3 --max-new-tokens 128 --block-complexity 10 --dtype float32 \
    --threads 2 --kernels "$K" --methods "$METHODS" --output-dir "$OUT/runs/bc10-$K" --no-report
done
specbench run --tasks spec_bench --limit 3 --max-new-tokens 128 --bc auto --dtype float32 --threads 2 \
  --methods ar,pld,samd --output-dir "$OUT/runs/auto-auto" --no-report
uptime > "$OUT/load-after.txt"
for d in "$OUT"/runs/*/*/; do specbench report "$d" --format markdown --columns bc > "$d/../$(basename "$d").md"; done
# lean (timed plan) vs transformers' forward, interleaved in one process, q = 1..128
python results/reference/roofline/forward_vs_sdpa.py --max-q 128 --rounds 5 -o "$OUT/forward-vs-sdpa.json" > "$OUT/forward-vs-sdpa.txt"
