#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# The sweep of docs/sweeps.md: 2 methods (+ AR) x 2 block complexities x 6 category shards on mini.
specbench sweep results/reference/sweep-example/sweep-example.toml -o "${1:-results/sweep-example}" --jobs "${JOBS:-1}"
