"""Hydra heads as `zankner/Hydra` publishes them (`ankner/hydra-vicuna-7b-v1.3`, 13b, 33b):
`config.json` = HydraConfig (`hydra_num_heads`, `hydra_num_layers`, `hydra_head_arch`,
`grounded_heads`, `hidden_state_offset`, `base_model_name_or_path`; no model widths) and
`hydra_lm_head.pt` = torch.save(hydra_head.state_dict()):

- `hydra_mlp.{i}.{j}.linear.weight|bias`, `.res_connection.weight|bias` (first block of a grounded
  head): j = 0, 1, ... for `mlp`; j = 1, 3, 5, ... for `prefix-mlp`, whose Sequential interleaves
  Dropout modules. The blocks after the first are one module repeated, so their tensors are equal.
- `hydra_lm_head.{i}.weight|bias` [V, h] (`mlp`) or `hydra_lm_head.{i}.1.weight|bias` (`prefix-mlp`).
- `prefix_embeding_layer.*` (`prefix-mlp`, sic): a one-layer LlamaModel: `layers.0.*`, `norm.weight`,
  an unused `embed_tokens.weight` and transformers 4.36's `rotary_emb.inv_freq` buffer (dropped).

Becomes methods/heads/hydra/model.py's layout. Refused: cross-attn / eagle-attn heads, a
`hidden_state_offset` other than 0 (heads on an inner layer), repeated blocks that differ.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.importers.common import Importer, first_file, read_config, read_tensors

FILES = ("hydra_lm_head.pt", "hydra_lm_head.safetensors", "hydra_lm_head.bin")
BLOCK = re.compile(r"^hydra_mlp\.(\d+)\.(\d+)\.(linear|res_connection)\.(weight|bias)$")
LM = re.compile(r"^hydra_lm_head\.(\d+)\.(?:1\.)?(weight|bias)$")
PREFIX = "prefix_embeding_layer."


def detect(src: Path) -> bool:
    return first_file(src, FILES) is not None


def _blocks(weights: Path, state: dict) -> tuple[dict, dict]:
    """({head: [block indices]}, {(head, block, part, param): tensor}); UsageError on a foreign key."""
    blocks: dict[int, set[int]] = {}
    parts = {}
    for key, value in state.items():
        m = BLOCK.match(key)
        if m:
            i, j = int(m.group(1)), int(m.group(2))
            blocks.setdefault(i, set()).add(j)
            parts[(i, j, m.group(3), m.group(4))] = value
        elif not LM.match(key) and not key.startswith(PREFIX):
            raise UsageError(f"{weights}: tensor '{key}' is not a Hydra key (hydra_mlp.*, hydra_lm_head.*, "
                             f"{PREFIX}*)")
    if not blocks:
        raise UsageError(f"{weights}: no Hydra blocks (hydra_mlp.{{i}}.{{j}}.linear.*) found")
    return {i: sorted(js) for i, js in blocks.items()}, parts


def _need(weights: Path, state: dict, key: str):
    if key not in state:
        raise UsageError(f"{weights}: missing tensor '{key}'")
    return state[key]


def convert(src: Path, out: Path) -> dict:
    import torch

    from specbench_cli.methods.heads.checkpoint import write_heads_folder
    from specbench_cli.methods.heads.hydra.model import ARCHS

    cfg = read_config(src)
    weights = first_file(src, FILES)
    state = {k: v.contiguous() for k, v in read_tensors(weights).items()}
    arch = cfg.get("hydra_head_arch", "mlp")
    if arch not in ARCHS:
        raise UsageError(f"{src / 'config.json'}: hydra_head_arch {json.dumps(arch)} is not supported "
                         f"(one of: {', '.join(ARCHS)})")
    if cfg.get("hidden_state_offset", 0) not in (0, None):
        raise UsageError(f"{src / 'config.json'}: hidden_state_offset {cfg['hidden_state_offset']} (heads on an "
                         f"inner layer) is not supported; only 0, the target's last hidden state")
    has_prefix = any(k.startswith(PREFIX) for k in state)
    if has_prefix != (arch == "prefix-mlp"):
        raise UsageError(f"{weights}: config.json says hydra_head_arch {arch} but the file "
                         f"{'has' if has_prefix else 'has no'} {PREFIX}* tensors")
    blocks, parts = _blocks(weights, state)
    heads = 1 + max(blocks)
    if sorted(blocks) != list(range(heads)):
        raise UsageError(f"{weights}: heads {sorted(blocks)} are not numbered 0..{heads - 1}")
    step = 2 if arch == "prefix-mlp" else 1  # Dropout modules sit between the blocks of prefix-mlp heads
    layers = len(blocks[0])
    new: dict = {}
    grounded = (0, blocks[0][0], "res_connection", "weight") in parts
    dotted = ".1" if arch == "prefix-mlp" else ""
    lm0 = _need(weights, state, f"hydra_lm_head.0{dotted}.weight")
    if lm0.dim() != 2:
        raise UsageError(f"{weights}: tensor 'hydra_lm_head.0{dotted}.weight' has shape {list(lm0.shape)}, expected [V, h]")
    hidden = int(lm0.shape[1])
    for i, js in blocks.items():
        want = [step - 1 + step * n for n in range(layers)]
        if js != want:
            raise UsageError(f"{weights}: head {i} has blocks {js}, expected {want} for {arch} heads of {layers} layers")
        for part, param in (("linear", "weight"), ("linear", "bias")) + ((("res_connection", "weight"),
                                                                            ("res_connection", "bias")) if grounded else ()):
            new[f"first.{i}.{part}.{param}"] = _need(weights, state, f"hydra_mlp.{i}.{js[0]}.{part}.{param}")
        for param in ("weight", "bias"):
            later = [_need(weights, state, f"hydra_mlp.{i}.{j}.linear.{param}") for j in js[1:]]
            if later:
                if any(not torch.equal(t, later[0]) for t in later[1:]):
                    raise UsageError(f"{weights}: blocks {js[1:]} of head {i} differ; Hydra repeats one block there")
                new[f"shared.{i}.linear.{param}"] = later[0]
        for param in ("weight", "bias"):
            new[f"lm_heads.{i}.{param}"] = _need(weights, state, f"hydra_lm_head.{i}{dotted}.{param}")
    vocab = int(new["lm_heads.0.weight"].shape[0])
    said = {"hydra_num_heads": cfg.get("hydra_num_heads"), "hydra_num_layers": cfg.get("hydra_num_layers"),
            "grounded_heads": cfg.get("grounded_heads")}
    notes = [f"config.json said {k} {v}; the file holds {got}" for (k, v), got in
             zip(said.items(), (heads, layers, grounded)) if v is not None and v != got]
    prefix = None
    if has_prefix:
        inner = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
        extra = [k for k in inner if not (k.startswith("layers.0.") or k in ("norm.weight", "embed_tokens.weight"))]
        extra = [k for k in extra if not k.endswith("rotary_emb.inv_freq")]
        if extra:
            raise UsageError(f"{weights}: tensor '{PREFIX}{extra[0]}' is not part of Hydra's one-layer prefix")
        for k, v in inner.items():
            if k.startswith("layers.0.") and not k.endswith("rotary_emb.inv_freq"):
                new["prefix.layer." + k[len("layers.0."):]] = v
        new["prefix.norm.weight"] = _need(weights, state, PREFIX + "norm.weight")
        gate = _need(weights, state, PREFIX + "layers.0.mlp.gate_proj.weight")
        prefix = {"intermediate_size": int(gate.shape[0])}  # attention geometry, eps and RoPE: the target's
    dtypes = sorted({str(v.dtype).replace("torch.", "") for v in new.values()})
    config = {"hydra_num_heads": heads, "hydra_num_layers": layers, "hydra_head_arch": arch,
              "grounded_heads": grounded, "hidden_size": hidden, "own_lm_heads": True, "vocab_size": vocab,
              "prefix": prefix, "architectures": ["HydraHeads"],
              "specbench": {"kind": "hydra", "heads": heads, "layers": layers,
                            "params": int(sum(v.numel() for v in new.values())),
                            "imported": {"from": src.name, "format": f"Hydra ({arch})", "file": weights.name,
                                         "base_model": cfg.get("base_model_name_or_path"), "notes": notes,
                                         "dtypes": dtypes}}}
    write_heads_folder(out, "hydra", new, config, atomic=True)
    return {"kind": "hydra", "heads": heads, "layers": layers, "arch": arch, "own_vocab": vocab, "notes": notes,
            "dtypes": dtypes}


IMPORTER = Importer("hydra", detect, convert)
