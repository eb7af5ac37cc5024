#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# Two writers on one run folder with the real model: the second exits 2 naming the first's pid.
OUT=${1:-results/reliability}
specbench run --methods ar,pld --limit 1 --max-new-tokens 64 --output-dir "$OUT" --no-report &
first=$!
sleep 40
run=$(ls -d "$OUT"/2* | head -1)
set +e; specbench run --resume "$run" --no-report; echo "second writer: exit $? (expected 2)"; set -e
wait "$first"
