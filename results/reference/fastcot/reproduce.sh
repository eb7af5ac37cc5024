#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# FastCoT vs CoT on Spec-Bench math_reasoning: calibration of the iteration cap, then Table 1.
bash results/reference/fastcot/fastcot.sh "${1:-results/fastcot}" "${LIMIT:-10}" "${BC:-10}" "${MAX_NEW:-256}"
