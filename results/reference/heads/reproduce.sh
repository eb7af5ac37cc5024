#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# Self-distillation data, the KOALA grid of heads (EAGLE / Medusa, K = 1..3, plain and adversarial),
# their evaluation next to AR and pld, the table, and the quiet heads-vs-pld comparison.
export HEADS_OUT=${1:-results/checkpoints/heads}
bash results/reference/heads/heads_data_v2.sh
names="eagle-k1-v2-s2000 eagle-k2-v2-s2000 eagle-k3-v2-s2000 medusa-h3-k1-v2-s2000 medusa-h3-k2-v2-s2000 medusa-h3-k3-v2-s2000"
bash results/reference/heads/train_heads.sh $names
for k in 1 2 3; do bash results/reference/heads/heads_eval.sh "eagle-k$k-v2-s2000" "medusa-h3-k$k-v2-s2000"; done
python results/reference/heads/heads_table.py
bash results/reference/heads/heads_vs_pld.sh eagle-k1-v2-s2000 medusa-h3-k3-v2-s2000
