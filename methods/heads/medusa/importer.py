"""Medusa-1 heads as FasterDecoding publishes them (`FasterDecoding/medusa-vicuna-7b-v1.3`):
`config.json` (`medusa_num_heads`, `medusa_num_layers`, `base_model_name_or_path`) and
`medusa_lm_head.pt` (or `.safetensors` from `train_legacy.py`) with `{i}.{j}.linear.weight|bias`
and each head's own vocabulary projection `{i}.{layers}.weight` [V, h]. The published config
says 2 heads while the file holds 5 (Medusa's loader forces 5 with a TODO): the tensors decide,
and the correction is recorded. Medusa-2 / TGI (`version: "2"`, ResBlocks only) converts too."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.importers.common import Importer, first_file, read_config, read_tensors

FILES = ("medusa_lm_head.pt", "medusa_lm_head.safetensors", "medusa_lm_head.bin")


def detect(src: Path) -> bool:
    return first_file(src, FILES) is not None


def convert(src: Path, out: Path) -> dict:
    from specbench_cli.methods.heads.checkpoint import write_heads_folder
    from specbench_cli.methods.heads.medusa.kind import layout as medusa_layout

    cfg = read_config(src) if (src / "config.json").is_file() else {}
    weights = first_file(src, FILES)
    state = {k: v.contiguous() for k, v in read_tensors(weights).items()}
    hidden, heads, layers, vocab = medusa_layout(weights, {k: (str(v.dtype), tuple(v.shape)) for k, v in state.items()})
    said = cfg.get("medusa_num_heads")
    notes = [] if said in (None, heads) else [f"config.json said medusa_num_heads {said}; the file holds {heads}"]
    dtypes = sorted({str(v.dtype).replace("torch.", "") for v in state.values()})
    new = {"medusa_num_heads": heads, "medusa_num_layers": layers, "hidden_size": hidden,
           "version": "1" if vocab is not None else "2", "architectures": ["MedusaHeads"],
           "specbench": {"kind": "medusa", "heads": heads, "layers": layers,
                         "params": int(sum(v.numel() for v in state.values())),
                         "imported": {"from": src.name, "format": "Medusa-1" if vocab is not None else "Medusa-2/TGI",
                                      "file": weights.name, "base_model": cfg.get("base_model_name_or_path"),
                                      "notes": notes, "dtypes": dtypes}}}
    if vocab is None and not any(k.endswith(".linear.weight") for k in state):
        raise UsageError(f"{weights}: no Medusa blocks found")
    write_heads_folder(out, "medusa", state, new, atomic=True)
    return {"kind": "medusa", "heads": heads, "layers": layers, "own_vocab": vocab, "notes": notes, "dtypes": dtypes}


IMPORTER = Importer("medusa", detect, convert)
