#!/usr/bin/env bash
# FastCoT vs its CoT baseline on Spec-Bench math_reasoning (SmolLM2-135M,
# float32, 1 thread). Calibrates the iteration cap on questions 11-20 (kept if calibration.json
# exists), runs ar + cot + fastcot on the first LIMIT questions, writes the Table-1 analog and
# the standard report (with the Acc column).
#   bash results/reference/fastcot/fastcot.sh [OUT_DIR] [LIMIT] [BC] [MAX_NEW]
set -euo pipefail
out=${1:-results/reference/fastcot}
limit=${2:-10}
bc=${3:-6}
max_new=${4:-256}
mkdir -p "$out"
if [ ! -f "$out/calibration.json" ]; then
  python results/reference/fastcot/fastcot_table.py calibrate --out "$out" --first "$limit" --n 10 --bc "$bc" \
    --max-new-tokens "$max_new" --threads 1
fi
cap=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen_max_iters'])" "$out/calibration.json")
uptime | tee "$out/load.txt"
specbench run --tasks spec_bench --categories math_reasoning --limit "$limit" --methods cot,fastcot \
  -o fastcot.max_iters="$cap" --block-complexity "$bc" --max-new-tokens "$max_new" --threads 1 \
  --output-dir "$out/runs" --no-report
uptime | tee -a "$out/load.txt"
run=$(ls -d "$out"/runs/*/ | tail -1)
python results/reference/fastcot/fastcot_table.py table "$run" --out "$out/table1.md"
specbench report "$run" --columns agree -o "$out/report" --no-plots
