"""EAGLE-3 heads in the published layouts (SafeAILab's `midlayer.*` pickle, SpecForge /
speculators' `layers.0.*` safetensors), random weights of the right shapes, for importer tests
and for engines that read the layout (vLLM's `speculative_config` method eagle3)."""

from __future__ import annotations

import json

import torch


def published_state(target, draft_vocab: int, seed: int = 0) -> dict:
    """Random tensors with the published shapes and names (SafeAILab), incl. the target's embedding."""
    g = torch.Generator().manual_seed(seed)
    c = target.config
    h, inter, nh, nkv = c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads
    hd = h // nh

    def w(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    state = {"fc.weight": w(h, 3 * h), "norm.weight": 1 + w(h, scale=0.05), "lm_head.weight": w(draft_vocab, h),
             "midlayer.hidden_norm.weight": 1 + w(h, scale=0.05), "midlayer.input_layernorm.weight": 1 + w(h, scale=0.05),
             "midlayer.post_attention_layernorm.weight": 1 + w(h, scale=0.05),
             "midlayer.self_attn.q_proj.weight": w(nh * hd, 2 * h), "midlayer.self_attn.k_proj.weight": w(nkv * hd, 2 * h),
             "midlayer.self_attn.v_proj.weight": w(nkv * hd, 2 * h), "midlayer.self_attn.o_proj.weight": w(h, nh * hd),
             "midlayer.mlp.gate_proj.weight": w(inter, h), "midlayer.mlp.up_proj.weight": w(inter, h),
             "midlayer.mlp.down_proj.weight": w(h, inter),
             "embed_tokens.weight": target.get_input_embeddings().weight.detach().clone()}
    if draft_vocab < c.vocab_size:  # every other target token, as offsets
        ids = torch.arange(draft_vocab) * (c.vocab_size // draft_vocab)
        state["d2t"] = ids - torch.arange(draft_vocab)
        t2d = torch.zeros(c.vocab_size, dtype=torch.bool)
        t2d[ids] = True
        state["t2d"] = t2d
    return state


def published_config(target, draft_vocab: int) -> dict:
    c = target.config
    return {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads, "num_hidden_layers": 1, "vocab_size": c.vocab_size,
            "draft_vocab_size": draft_vocab, "rms_norm_eps": c.rms_norm_eps, "hidden_act": "silu",
            "max_position_embeddings": 1024, "rope_theta": 10000.0, "torch_dtype": "float16"}


def write_safeailab(folder, target, draft_vocab=64, dtype=torch.float32, feature_layers=(0, 1, 1)):
    """SafeAILab's layout; `feature_layers` None leaves the layers to EAGLE-3's rule (2, L//2, L-3)."""
    folder.mkdir(parents=True)
    state = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in published_state(target, draft_vocab).items()}
    torch.save(state, folder / "pytorch_model.bin")
    cfg = published_config(target, draft_vocab)
    if feature_layers is not None:
        cfg["feature_layers"] = list(feature_layers)
    (folder / "config.json").write_text(json.dumps(cfg))
    return state


def write_speculators(folder, target, dtype=torch.bfloat16):
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    state = published_state(target, target.config.vocab_size, seed=1)
    renamed = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v.to(dtype)
               for k, v in state.items() if k != "embed_tokens.weight"}
    save_file(renamed, str(folder / "model.safetensors"))
    cfg = published_config(target, target.config.vocab_size)
    inner = {k: cfg.pop(k) for k in list(cfg) if k not in ("draft_vocab_size", "architectures")}
    (folder / "config.json").write_text(json.dumps({
        "speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"], "draft_vocab_size":
        cfg["draft_vocab_size"], "transformer_layer_config": inner, "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": [0, 1, 1]}))
    return {k: v.to(dtype).float() if v.is_floating_point() else v for k, v in state.items()}
