#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# Self-distillation data, SFT and MSN (noise length 1, 4, 8) at equal budget, then speed and quality.
export MSN_ROOT=${1:-results/checkpoints/msn} RUNS=${RUNS:-results/msn-runs}
bash results/reference/msn/msn_train.sh data
for name in sft msn4 msn1 msn8; do bash results/reference/msn/msn_train.sh "$name"; done
for name in base sft msn1 msn4 msn8; do
  bash results/reference/msn/msn_train.sh eval "$name"
  bash results/reference/msn/msn_train.sh quality "$name"
done
