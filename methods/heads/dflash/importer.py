"""DFlash drafters in z-lab's published layout (`z-lab/Qwen3-8B-DFlash-b16`,
`z-lab/Qwen3-4B-DFlash-b16`, `z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat`, ...): `config.json`
(a Qwen3 config with `architectures: ["DFlashDraftModel"]`, an `auto_map` naming the folder's own
`dflash.py`, `block_size`, `num_target_layers` and `dflash_config` with `mask_token_id` and
`target_layer_ids`) and `model.safetensors` (`fc.weight`, `hidden_norm.weight`, `norm.weight`,
`layers.{i}.*`). The layout is already this kind's (methods/heads/dflash/model.py): the tensors are
copied as they are (a copy of the target's `embed_tokens` / `lm_head` dropped), the config keeps its
fields (the `auto_map` code is never run nor copied) and gains our metadata."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.importers.common import Importer, read_config, read_tensors

FILE = "model.safetensors"


def detect(src: Path) -> bool:
    from specbench_cli.methods.heads.dflash.kind import is_dflash

    if not (src / FILE).is_file() or not (src / "config.json").is_file():
        return False
    try:
        return is_dflash(read_config(src))
    except UsageError:
        return False


def convert(src: Path, out: Path) -> dict:
    from specbench_cli.methods.heads.checkpoint import write_heads_folder
    from specbench_cli.methods.heads.dflash.kind import _check

    cfg = read_config(src)
    _check(cfg, src / "config.json")
    state = read_tensors(src / FILE)
    kept, dropped = {}, []
    for key, value in state.items():
        if key.startswith(("embed_tokens.", "model.embed_tokens.", "lm_head.")):
            dropped.append(key)
            continue
        kept[key] = value.contiguous()
    for key in ("fc.weight", "hidden_norm.weight", "norm.weight", "layers.0.self_attn.q_proj.weight"):
        if key not in kept:
            raise UsageError(f"{src / FILE}: missing tensor '{key}' (not a DFlash drafter)")
    config = {k: v for k, v in cfg.items() if k not in ("auto_map", "specbench")}
    dtypes = sorted({str(v.dtype).replace("torch.", "") for v in kept.values() if v.dtype.is_floating_point})
    config["specbench"] = {"kind": "dflash", "layers": int(cfg["num_hidden_layers"]),
                           "params": int(sum(v.numel() for v in kept.values() if v.dtype.is_floating_point)),
                           "imported": {"from": src.name, "format": "DFlash (z-lab)", "file": FILE,
                                        "dropped": dropped, "dtypes": dtypes}}
    write_heads_folder(out, "dflash", kept, config, atomic=True)
    return {"kind": "dflash", "layout": "z-lab", "tensors": len(kept), "dropped": dropped, "dtypes": dtypes}


IMPORTER = Importer("dflash", detect, convert)
