#!/usr/bin/env bash
# AR tok/s per --forward flavour with the same command, one run after the other.
#   bash results/reference/forward/forward_ar_runs.sh OUT_DIR THREADS FORWARD...
# Each run's manifest records its forward; the load average before/after goes to OUT_DIR/log.
set -u
out=$1; threads=$2; shift 2
mkdir -p "$out"
for f in "$@"; do
  echo "$f threads=$threads start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/log"
  specbench run --methods ar --tasks spec_bench --limit 1 --max-new-tokens 128 --threads "$threads" \
    --forward "$f" --output-dir "$out/$f-t$threads" --no-report > "$out/$f-t$threads.out" 2>&1
  echo "$f threads=$threads end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$?" >> "$out/log"
done
