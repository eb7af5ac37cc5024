"""Write a tiny Llama GGUF file (float32, byte-level BPE vocabulary of 64 tokens) with the
`gguf` package, small enough (20 kB) that transformers converts it in well under a second.
Lets tests drive the real GGUF -> safetensors conversion and its cache."""

from __future__ import annotations

from pathlib import Path

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 16, 1, 2, 1, 32


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(VOCAB)
    w.add_file_type(0)  # all float32
    tokens = ["<unk>", "<s>", "</s>"] + [chr(97 + i % 26) * (1 + i // 26) for i in range(VOCAB - 3)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (VOCAB - 3))  # 3 = control, 1 = normal
    w.add_token_scores([0.0] * VOCAB)  # transformers' GGUF tokenizer reader expects scores even for BPE
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    rng = np.random.default_rng(seed)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    head_dim = HIDDEN // HEADS
    w.add_tensor("token_embd.weight", rand(VOCAB, HIDDEN))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    w.add_tensor("output.weight", rand(VOCAB, HIDDEN))
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(HIDDEN, np.float32))
        w.add_tensor(p + "attn_q.weight", rand(HIDDEN, HIDDEN))
        w.add_tensor(p + "attn_k.weight", rand(KV_HEADS * head_dim, HIDDEN))
        w.add_tensor(p + "attn_v.weight", rand(KV_HEADS * head_dim, HIDDEN))
        w.add_tensor(p + "attn_output.weight", rand(HIDDEN, HIDDEN))
        w.add_tensor(p + "ffn_norm.weight", np.ones(HIDDEN, np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(FFN, HIDDEN))
        w.add_tensor(p + "ffn_up.weight", rand(FFN, HIDDEN))
        w.add_tensor(p + "ffn_down.weight", rand(HIDDEN, FFN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
