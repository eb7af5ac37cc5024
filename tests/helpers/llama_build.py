"""llama.cpp's build (tools/build-llama-cpp.sh) for the tests that load libllama: skipped where it is
missing, a failure under CI, which builds it."""

from __future__ import annotations

import os

import pytest


def require_llama_cpp_build():
    """The located build (`find_llama_cpp`), with its `libllama.so`."""
    from specbench_cli.locate import find_llama_cpp

    found = find_llama_cpp()
    if found is None or found.library is None:
        if os.environ.get("CI"):
            pytest.fail("CI builds llama.cpp (tools/build-llama-cpp.sh): libllama.so was not found", pytrace=False)
        pytest.skip("llama.cpp's libllama.so is not built (tools/build-llama-cpp.sh)")
    return found
