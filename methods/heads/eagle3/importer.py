"""EAGLE-3 heads in the two published layouts:

- SafeAILab (`yuhuili/EAGLE3-Vicuna1.3-13B`, `EAGLE3-LLaMA3.1-Instruct-8B`): `config.json` (a
  LlamaConfig with `num_hidden_layers: 1`, `draft_vocab_size`, optional `target_hidden_size`) and
  `pytorch_model.bin` or `model.safetensors` with `midlayer.*`, `fc.weight`, `norm.weight`,
  `lm_head.weight`, `d2t`, `t2d` (the maps are left out when the draft vocabulary is the target's).
- SpecForge (`LlamaForCausalLMEagle3`) and vllm speculators: the layer's tensors under `layers.0.*`;
  speculators nests the Llama fields in `transformer_layer_config` and adds `norm_before_residual`
  and `eagle_aux_hidden_state_layer_ids` (the three target layers; kept as `feature_layers`).

Both become SafeAILab's layout (methods/heads/eagle3/model.py); a copy of the target's
`embed_tokens` is dropped, missing maps are the identity (`d2t` zeros, `t2d` all true)."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.importers.common import Importer, first_file, read_config, read_tensors

FILES = ("pytorch_model.bin", "model.safetensors")
LLAMA_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
                "rope_theta", "rope_scaling", "max_position_embeddings", "hidden_act", "head_dim", "vocab_size")


def _flat(cfg: dict) -> dict:
    """speculators' nesting -> one LlamaConfig-like dict."""
    inner = cfg.get("transformer_layer_config")
    if isinstance(inner, dict):
        cfg = {**inner, **{k: v for k, v in cfg.items() if k != "transformer_layer_config"}}
    return cfg


def detect(src: Path) -> bool:
    if first_file(src, FILES) is None or not (src / "config.json").is_file():
        return False
    try:
        cfg = _flat(read_config(src))
    except UsageError:
        return False
    return "draft_vocab_size" in cfg


def convert(src: Path, out: Path) -> dict:
    import torch

    from specbench_cli.methods.heads.checkpoint import write_heads_folder

    raw = read_config(src)
    cfg = _flat(raw)
    weights = first_file(src, FILES)
    state = read_tensors(weights)
    layout = "SafeAILab" if any(k.startswith("midlayer.") for k in state) else "SpecForge/speculators"
    kept, dropped = {}, []
    for key, value in state.items():
        if key.startswith(("embed_tokens.", "model.embed_tokens.")):
            dropped.append(key)
            continue
        if key.startswith("layers.0."):
            key = "midlayer." + key[len("layers.0."):]
        elif key.startswith("layers."):
            raise UsageError(f"{weights}: tensor '{key}': an EAGLE-3 head has one layer (layers.0)")
        kept[key] = value.contiguous()
    for key in ("fc.weight", "norm.weight", "lm_head.weight", "midlayer.self_attn.q_proj.weight"):
        if key not in kept:
            raise UsageError(f"{weights}: missing tensor '{key}' (not an EAGLE-3 head)")
    draft_vocab, vocab = cfg.get("draft_vocab_size"), cfg.get("vocab_size")
    if not isinstance(draft_vocab, int) or not isinstance(vocab, int):
        raise UsageError(f"{src / 'config.json'}: 'draft_vocab_size' and 'vocab_size' must be integers")
    if tuple(kept["lm_head.weight"].shape)[0] != draft_vocab:
        raise UsageError(f"{weights}: tensor 'lm_head.weight' has {kept['lm_head.weight'].shape[0]} rows, "
                         f"config.json says draft_vocab_size {draft_vocab}")
    filled = []
    if "d2t" not in kept:
        if draft_vocab != vocab:
            raise UsageError(f"{weights}: missing tensor 'd2t' (the draft vocabulary, {draft_vocab}, is not the "
                             f"target's, {vocab})")
        kept["d2t"], kept["t2d"] = torch.zeros(draft_vocab, dtype=torch.long), torch.ones(vocab, dtype=torch.bool)
        filled = ["d2t", "t2d"]
    elif "t2d" not in kept:
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[torch.arange(draft_vocab) + kept["d2t"].long()] = True
        kept["t2d"] = t2d
        filled = ["t2d"]
    kept["d2t"], kept["t2d"] = kept["d2t"].long(), kept["t2d"].bool()
    fc_in = int(kept["fc.weight"].shape[1])
    if fc_in % 3:
        raise UsageError(f"{weights}: tensor 'fc.weight' reads {fc_in} features, not three target states")
    config = {k: cfg[k] for k in LLAMA_FIELDS if k in cfg}
    # EAGLE-3's own architecture name and a model_type, as `train heads --kind eagle3` writes them: vLLM's
    # `speculative_config` method eagle3 loads the folder as it is (it needs both)
    config.update({"num_hidden_layers": 1, "draft_vocab_size": draft_vocab, "architectures": ["LlamaForCausalLMEagle3"],
                   "model_type": cfg.get("model_type") or "llama"})
    if fc_in // 3 != cfg.get("hidden_size"):
        config["target_hidden_size"] = fc_in // 3
    layers = cfg.get("eagle_aux_hidden_state_layer_ids") or cfg.get("feature_layers")
    if layers is not None:
        config["feature_layers"] = list(layers)
    if cfg.get("norm_before_residual"):
        config["norm_before_residual"] = True
    dtypes = sorted({str(v.dtype).replace("torch.", "") for v in kept.values() if v.dtype.is_floating_point})
    config["specbench"] = {"kind": "eagle3", "layers": 1,
                           "params": int(sum(v.numel() for v in kept.values() if v.dtype.is_floating_point)),
                           "imported": {"from": src.name, "format": f"EAGLE-3 ({layout})", "file": weights.name,
                                        "dropped": dropped, "filled": filled, "dtypes": dtypes}}
    write_heads_folder(out, "eagle3", kept, config, atomic=True)
    return {"kind": "eagle3", "layout": layout, "tensors": len(kept), "dropped": dropped, "filled": filled,
            "dtypes": dtypes}


IMPORTER = Importer("eagle3", detect, convert)
