"""Write a GGUF with every tensor of another de-quantised to float32, the metadata as it is.

    python f32_gguf.py SRC.gguf DST.gguf

The embedded default model is a Q4_1 GGUF; specbench's `hf` target and vLLM load its weights
de-quantised to float32, so this file gives llama.cpp the very same weights
(specbench_cli/models/gguf_f32.py)."""

from __future__ import annotations

import sys

from specbench_cli.models.gguf_f32 import float32_copy

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python f32_gguf.py SRC.gguf DST.gguf")
    float32_copy(sys.argv[1], sys.argv[2])
