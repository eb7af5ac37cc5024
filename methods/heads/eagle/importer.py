"""EAGLE-1 / EAGLE-2 / HASS heads as SafeAILab publishes them (`yuhuili/EAGLE-Vicuna-7B-v1.3`,
HASS keeps the format): `config.json` (a LlamaConfig, `num_hidden_layers` = 1, an optional
`bias` for `fc`) and `pytorch_model.bin` (or `model.safetensors`) with `fc.weight|bias`,
`layers.{k}.*` (layer 0 without `input_layernorm`) and often the target's `embed_tokens.weight`,
which is dropped (the head uses the target's embedding). EAGLE-2 uses the same weights; only the
tree differs (`-o eagle.tree=static` for EAGLE-1's 25-node tree)."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.importers.common import Importer, first_file, read_config, read_tensors

FILES = ("pytorch_model.bin", "model.safetensors")
# HASS-style variants with extra norms (vllm speculators' converter lists them); not this head
EXTRA_NORMS = ("embed_layernorm", "hidden_layernorm", "lm_head_layernorm")


def detect(src: Path) -> bool:
    if first_file(src, FILES) is None or not (src / "config.json").is_file():
        return False
    try:
        cfg = read_config(src)
    except UsageError:
        return False
    return "num_hidden_layers" in cfg and "draft_vocab_size" not in cfg and "medusa_num_heads" not in cfg \
        and "dflash_config" not in cfg


def convert(src: Path, out: Path) -> dict:
    from specbench_cli.methods.heads.checkpoint import write_heads_folder

    cfg = read_config(src)
    weights = first_file(src, FILES)
    state = read_tensors(weights)
    if any(k.startswith("midlayer.") for k in state):
        raise UsageError(f"{weights}: 'midlayer.*' tensors are EAGLE-3's layout, but config.json has no "
                         f"'draft_vocab_size' (an EAGLE-3 config names its draft vocabulary)")
    extra = [k for k in state if k.split(".")[0] in EXTRA_NORMS]
    if extra:
        raise UsageError(f"{weights}: tensor '{extra[0]}' belongs to a HASS variant with extra norms, "
                         f"which this tool's EAGLE head does not have")
    if "fc.weight" not in state:
        raise UsageError(f"{weights}: missing tensor 'fc.weight' (not an EAGLE head)")
    dropped = [k for k in state if k.startswith("embed_tokens.")]
    kept = {k: v.contiguous() for k, v in state.items() if k not in dropped}
    cfg["bias"] = "fc.bias" in kept  # the tensors decide (EAGLE's config may omit it: default true)
    layers = 1 + max((int(k.split(".")[1]) for k in kept if k.startswith("layers.")), default=-1)
    if layers != cfg.get("num_hidden_layers"):
        raise UsageError(f"{weights}: holds {layers} decoder layer(s), config.json says {cfg.get('num_hidden_layers')}")
    dtypes = sorted({str(v.dtype).replace("torch.", "") for v in kept.values()})
    cfg["specbench"] = {"kind": "eagle", "layers": layers, "params": int(sum(v.numel() for v in kept.values())),
                        "imported": {"from": src.name, "format": "EAGLE-1/2 (SafeAILab)", "file": weights.name,
                                     "dropped": dropped, "dtypes": dtypes}}
    write_heads_folder(out, "eagle", kept, cfg, atomic=True)
    return {"kind": "eagle", "layers": layers, "tensors": len(kept), "dropped": dropped, "dtypes": dtypes}


IMPORTER = Importer("eagle", detect, convert)
