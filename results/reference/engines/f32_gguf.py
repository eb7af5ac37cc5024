"""Write a GGUF with every tensor of another de-quantised to float32, the metadata as it is.

    python f32_gguf.py SRC.gguf DST.gguf

The embedded default model is a Q4_1 GGUF; specbench's `hf` target and vLLM load its weights
de-quantised to float32, so this file gives llama.cpp the very same weights."""

from __future__ import annotations

import sys


def float32_copy(src: str, dst: str) -> None:
    import gguf
    import numpy as np
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if field.name == "general.file_type":
            writer.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        kind = field.types[0]
        writer.add_key_value(field.name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, dequantize(tensor.data, tensor.tensor_type).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python f32_gguf.py SRC.gguf DST.gguf")
    float32_copy(sys.argv[1], sys.argv[2])
