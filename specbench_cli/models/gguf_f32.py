"""A GGUF with every tensor de-quantised to float32 and the metadata as it is: llama.cpp then runs
the very weights specbench's `hf` target loads from a quantised GGUF (the engines study, the
llama.cpp target's exactness tests)."""

from __future__ import annotations


def float32_copy(src, dst) -> None:
    """Write `dst`: the GGUF `src` with every tensor de-quantised to float32."""
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
