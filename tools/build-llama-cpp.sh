#!/usr/bin/env bash
# Build llama.cpp's `llama-server` and its shared library `libllama` from one pinned source
# release: the full llama.cpp tree vendored in llama-cpp-python's source distribution on PyPI.
#
#   tools/build-llama-cpp.sh [PREFIX]      (default: $SPECBENCH_LLAMA_CPP or ~/.cache/specbench/llama.cpp-0.3.36)
#
# Leaves PREFIX/bin/llama-server, PREFIX/lib/libllama.so (+ the ggml libraries it links) and
# PREFIX/src (the source tree, for convert_hf_to_gguf.py). specbench finds them through
# `--engine-bin`, $SPECBENCH_LLAMA_CPP or PATH. Takes about 11 minutes on 2 cores. Idempotent:
# an existing build is kept.
set -euo pipefail
VERSION=0.3.36
PREFIX="${1:-${SPECBENCH_LLAMA_CPP:-$HOME/.cache/specbench/llama.cpp-$VERSION}}"
JOBS="${JOBS:-$(nproc)}"
PY="${PYTHON:-python3}"
if [ -x "$PREFIX/bin/llama-server" ] && ls "$PREFIX"/lib/libllama.so* >/dev/null 2>&1; then
    echo "llama.cpp already built in $PREFIX"; exit 0
fi
mkdir -p "$PREFIX"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
rm -rf "$PREFIX/src"
mv "$work/llama_cpp_python-$VERSION/vendor/llama.cpp" "$PREFIX/src"
rm -f "$PREFIX/src/.git"   # a submodule pointer to a repository the sdist lacks
start=$(date +%s)
cmake -S "$PREFIX/src" -B "$PREFIX/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib' >"$PREFIX/cmake.log"
cmake --build "$PREFIX/build" -j "$JOBS" --target llama-server >"$PREFIX/build.log"
mkdir -p "$PREFIX/bin" "$PREFIX/lib"
cp "$PREFIX/build/bin/llama-server" "$PREFIX/bin/"
find "$PREFIX/build" -name 'lib*.so*' -exec cp -P {} "$PREFIX/lib/" \;
echo "llama.cpp $VERSION built in $PREFIX in $(( $(date +%s) - start )) s"
