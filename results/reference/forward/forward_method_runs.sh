#!/usr/bin/env bash
# A method against AR under each --forward, same command otherwise (one run per flavour).
#   bash results/reference/forward/forward_method_runs.sh OUT_DIR METHODS FORWARD...
set -u
out=$1; methods=$2; shift 2
mkdir -p "$out"
for f in "$@"; do
  echo "$f start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
  specbench run --methods "$methods" --tasks spec_bench --limit 1 --max-new-tokens 128 --threads 1 \
    --forward "$f" --output-dir "$out/$f" --no-report > "$out/$f.out" 2>&1
  echo "$f end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$?" >> "$out/log"
done
