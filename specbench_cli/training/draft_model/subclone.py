"""Subclone drafter: the target's embeddings, its first k decoder layers, its final norm and its
lm_head, optionally with narrowed MLPs, as a normal Hugging Face causal-LM folder that shares
the target's tokenizer and vocabulary.

Works for Llama-style models whose decoder exposes ``model.model.layers`` and MLPs with
``gate_proj`` / ``up_proj`` / ``down_proj`` (Llama, Mistral, Qwen2, SmolLM2, ...).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from specbench_cli.errors import UsageError

_LAYER_KEY = re.compile(r"^model\.layers\.(\d+)\.(.*)$")
_MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


def mlp_channel_scores(state: dict, layer: int):
    """Importance of each MLP intermediate channel of one layer.

    score[j] = ||gate[j, :]|| * ||up[j, :]|| * ||down[:, j]||  with gate, up: (I, H), down: (H, I).
    Returns a (I,) float tensor.
    """
    gate, up, down = (state[f"model.layers.{layer}.{k}"].float() for k in _MLP)
    return gate.norm(dim=1) * up.norm(dim=1) * down.norm(dim=0)


# ~64 lines: one straight sequence (config copy, layer choice, weight copy, checks) read top to bottom.
def subclone(target: Any, layers: int, narrow_ffn: float = 1.0) -> Any:
    """Build the drafter model (same class as `target`, eval mode, same dtype).

    Args:
        target: a loaded causal LM (e.g. LlamaForCausalLM) with L decoder layers.
        layers: k, number of leading decoder layers kept (1 <= k <= L).
        narrow_ffn: fraction of MLP intermediate channels kept in every kept layer, chosen per
            layer by `mlp_channel_scores` (1.0 keeps the MLPs intact). Kept channels stay in
            their original order.
    """
    import torch

    cfg = target.config
    n_layers = getattr(cfg, "num_hidden_layers", None)
    if n_layers is None or not hasattr(getattr(target, "model", None), "layers"):
        raise UsageError(f"cannot subclone a {type(target).__name__}: expected a Llama-style model.layers stack")
    if not 1 <= layers <= n_layers:
        raise UsageError(f"--layers must be between 1 and {n_layers} (the target has {n_layers} layers), got {layers}")
    if not 0.0 < narrow_ffn <= 1.0:
        raise UsageError(f"--narrow-ffn must be in (0, 1], got {narrow_ffn}")

    new_cfg = copy.deepcopy(cfg)
    new_cfg.num_hidden_layers = layers
    if isinstance(getattr(new_cfg, "layer_types", None), list):
        new_cfg.layer_types = new_cfg.layer_types[:layers]
    width = cfg.intermediate_size
    keep = max(1, int(round(width * narrow_ffn)))
    new_cfg.intermediate_size = keep

    state = target.state_dict()
    new_state = {}
    for key, value in state.items():
        m = _LAYER_KEY.match(key)
        if m is None:
            new_state[key] = value.clone()
            continue
        i, rest = int(m.group(1)), m.group(2)
        if i >= layers:
            continue
        if keep < width and rest in _MLP:
            idx = mlp_channel_scores(state, i).topk(keep).indices.sort().values
            value = value[idx] if rest != "mlp.down_proj.weight" else value[:, idx]
        new_state[key] = value.clone()

    with torch.device("meta"):
        draft = type(target)(new_cfg)
    draft.load_state_dict(new_state, strict=False, assign=True)
    # tie lm_head to the embeddings again when the target ties them (assign=True broke the tie)
    if getattr(new_cfg, "tie_word_embeddings", False):
        draft.tie_weights()
    missing = [n for n, p in draft.named_parameters() if p.is_meta]
    missing += [n for n, b in draft.named_buffers() if b.is_meta]
    if missing:
        # non-persistent buffers (rotary inv_freq) are rebuilt by re-creating the rotary module
        rotary = getattr(draft.model, "rotary_emb", None)
        if rotary is not None and all("rotary_emb" in n for n in missing):
            draft.model.rotary_emb = type(rotary)(config=new_cfg)
        else:
            raise RuntimeError(f"subclone left parameters unset: {missing[:5]}")
    draft.to(next(target.parameters()).dtype)
    if hasattr(target, "generation_config"):
        draft.generation_config = copy.deepcopy(target.generation_config)
    draft.eval()
    return draft


def subclone_meta(target_ref: str, target_resolved: str, target: Any, draft: Any, narrow_ffn: float) -> dict:
    """Provenance written next to the drafter (specbench_drafter.json)."""
    return {
        "kind": "subclone",
        "target": target_ref,
        "target_resolved": target_resolved,
        "target_layers": target.config.num_hidden_layers,
        "layers": list(range(draft.config.num_hidden_layers)),
        "narrow_ffn": narrow_ffn,
        "intermediate_size": draft.config.intermediate_size,
        "target_intermediate_size": target.config.intermediate_size,
        "params": sum(p.numel() for p in draft.parameters()),
        "target_params": sum(p.numel() for p in target.parameters()),
    }
