#!/usr/bin/env bash
# The error rates of the statistical gate of `specbench check` on this machine (docs/ci-gate.md):
#   1. PAIRS A/A pairs of real runs, made one after the other with nothing changed in between:
#      Spec-Bench, LIMIT questions per category (10: 60 questions), METHODS (ar + pld), greedy
#      float32, 2 threads, TOKENS new tokens. A run that was interrupted is resumed; finished
#      ones are kept, so the script can be run again until every pair exists;
#   2. gate_study.py: false alarms (b checked against a baseline of a) and detections (b with
#      its drafting methods made SLOWDOWN slower) for 18 questions (the first 3 per category,
#      the questions `--limit 3` selects) and for 60, written to results-<N>q.md and .json (N: the
#      runs' question count, 60 by default). It uses every finished pair, so a partial study can be
#      read while the rest is still to be run.
# Run alone on the machine: each manifest records the load average, and the study flags busy runs.
# The run folders stay in runs/ (about 0.5 MB each; not committed).
set -euo pipefail
cd "$(dirname "$0")"
PAIRS=${PAIRS:-20}
LIMIT=${LIMIT:-10}
METHODS=${METHODS:-ar,pld}
TOKENS=${TOKENS:-64}
SLOWDOWN=${SLOWDOWN:-0.10}
OUT=${OUT:-runs}

one_run() {  # folder
  local unfinished
  unfinished=$(python - "$1" <<'PY'
import json, sys
from pathlib import Path
for m in sorted(Path(sys.argv[1]).glob("*/manifest.json")):
    if not json.loads(m.read_text()).get("finished"):
        print(m.parent)
PY
)
  if [ -n "$unfinished" ]; then
    specbench run --resume "$unfinished" --no-report
  elif ! ls "$1"/*/manifest.json >/dev/null 2>&1; then
    specbench run --tasks spec_bench --limit "$LIMIT" --methods "$METHODS" --max-new-tokens "$TOKENS" \
      --threads 2 --dtype float32 --output-dir "$1" --no-report
  fi
}

for i in $(seq -f "%02g" 1 "$PAIRS"); do
  for side in a b; do
    echo "== pair $i, run $side ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
    one_run "$OUT/pair-$i/$side"
  done
done
python gate_study.py "$OUT" --sizes "${SIZES:-18,$((LIMIT * 6))}" --slowdown "$SLOWDOWN" \
  --out "${REPORT:-results-$((LIMIT * 6))q.md}"
