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
# The instruction sets the CPU kernels are built for, named one by one from /proc/cpuinfo instead of
# -march=native: a VM may advertise AMX without enabling its register state, and llama.cpp's AMX
# kernels then die by SIGILL in the first decode (seen on a 2-core AVX-512 VM whose flags list
# amx_tile/amx_int8/amx_bf16). AMX is never enabled; it speeds up only int8/bf16 products.
isa_flags() {
    local flags; flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    local out="" pair
    for pair in sse4_2:SSE42 f16c:F16C fma:FMA bmi2:BMI2 avx:AVX avx2:AVX2 avx_vnni:AVX_VNNI \
                avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
        case "$flags" in *" ${pair%%:*} "*) out="$out -DGGML_${pair#*:}=ON" ;; *) out="$out -DGGML_${pair#*:}=OFF" ;; esac
    done
    local avx512=ON f
    for f in avx512f avx512cd avx512vl avx512dq avx512bw; do
        case "$flags" in *" $f "*) ;; *) avx512=OFF ;; esac
    done
    out="$out -DGGML_AVX512=$avx512"
    echo "-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF$out"
}
ISA="$(isa_flags)"
# An existing build is kept only when it was made for the same instruction sets (its stamp).
if [ -x "$PREFIX/bin/llama-server" ] && ls "$PREFIX"/lib/libllama.so* >/dev/null 2>&1 \
    && [ "$(cat "$PREFIX/isa-flags" 2>/dev/null)" = "$ISA" ]; then
    echo "llama.cpp already built in $PREFIX"; exit 0
fi
rm -rf "$PREFIX/build" "$PREFIX/bin" "$PREFIX/lib" "$PREFIX/isa-flags"
mkdir -p "$PREFIX"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
rm -rf "$PREFIX/src"
mv "$work/llama_cpp_python-$VERSION/vendor/llama.cpp" "$PREFIX/src"
rm -f "$PREFIX/src/.git"   # a submodule pointer to a repository the sdist lacks
start=$(date +%s)
# shellcheck disable=SC2086  # $ISA is a list of -D options
cmake -S "$PREFIX/src" -B "$PREFIX/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF $ISA \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib' >"$PREFIX/cmake.log"
cmake --build "$PREFIX/build" -j "$JOBS" --target llama-server >"$PREFIX/build.log"
mkdir -p "$PREFIX/bin" "$PREFIX/lib"
cp "$PREFIX/build/bin/llama-server" "$PREFIX/bin/"
find "$PREFIX/build" -name 'lib*.so*' -exec cp -P {} "$PREFIX/lib/" \;
echo "$ISA" >"$PREFIX/isa-flags"
echo "llama.cpp $VERSION built in $PREFIX in $(( $(date +%s) - start )) s"
