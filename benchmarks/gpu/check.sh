#!/usr/bin/env bash
# The GPU check: losslessness on the device in float32 (required) and bfloat16 (recorded), a mini
# run of ar, pld, samd, suffix and medusa, and `specbench cost`, written to one folder. Uses the
# torch and transformers already installed (a GPU box may have no network):
#
#   bash benchmarks/gpu/check.sh [--device cuda] [--out gpu-check] [--quick] [--model REF]
#
# Where `specbench_cli` is not importable yet, set WHEELHOUSE to a folder holding this project's
# wheel and the small wheels it needs beyond torch and transformers (typer, rich, gguf,
# safetensors, pandas, matplotlib, accelerate, pytest, hypothesis; `pip download` them on a machine
# with network): they are installed with --no-deps. Under 10 minutes on one H100. CI runs it with
# `--device cpu --quick` so it cannot rot.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python}"
if ! "$PY" -c "import specbench_cli" 2>/dev/null; then
  if [ -n "${WHEELHOUSE:-}" ]; then
    "$PY" -m pip install -q --no-deps --no-index "$WHEELHOUSE"/*.whl
  else
    echo "specbench_cli is not installed: pip install --no-deps the built wheel (or set WHEELHOUSE)" >&2
    exit 2
  fi
fi
exec "$PY" benchmarks/gpu/check.py "$@"
