"""Medusa-2 full models (`FasterDecoding/medusa-1.0-vicuna-7b-v1.5`, `...-zephyr-7b-beta`): a whole
fine-tuned target whose weights also hold the heads, `medusa_head.{i}.{j}.linear.weight|bias` and
each head's vocabulary projection `medusa_head.{i}.{layers}.weight`, next to `config.json` with
`medusa_num_heads` / `medusa_num_layers`. The import takes the heads out into a heads folder; the
target is then that model folder itself (transformers loads it and leaves the `medusa_head.*`
tensors aside), which the heads folder records, so `--heads` checks `--model` against it."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import MAX_INPUT_BYTES, read_json
from specbench_cli.methods.heads.importers.common import Importer, read_config, read_tensors

PREFIX = "medusa_head."
SINGLE = ("model.safetensors", "pytorch_model.bin")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _weight_files(src: Path) -> list[Path]:
    """The files holding `medusa_head.*` tensors: from a shard index when there is one."""
    for name in INDEXES:
        index = src / name
        if index.is_file():
            weight_map = read_json(index, "shard index", max_bytes=MAX_INPUT_BYTES)
            weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
            if not isinstance(weight_map, dict):
                raise UsageError(f"{index}: not a shard index (no 'weight_map' object)")
            files = [f for k, f in weight_map.items() if isinstance(k, str) and k.startswith(PREFIX)]
            if not all(isinstance(f, str) and f and Path(f).name == f and f not in (".", "..") for f in files):
                raise UsageError(f"{index}: not a shard index (a weight file is not a file name in {src})")
            return [src / f for f in sorted(set(files))]
    return [src / n for n in SINGLE if (src / n).is_file()][:1]


def detect(src: Path) -> bool:
    if not (src / "config.json").is_file():
        return False
    try:
        cfg = read_config(src)
    except UsageError:
        return False
    return "medusa_num_heads" in cfg and any((src / n).is_file() for n in SINGLE + INDEXES)


def convert(src: Path, out: Path) -> dict:
    from specbench_cli.methods.heads.checkpoint import write_heads_folder
    from specbench_cli.methods.heads.medusa.kind import layout as medusa_layout

    cfg = read_config(src)
    files = _weight_files(src)
    if not files:
        raise UsageError(f"{src}: config.json names Medusa heads but no weight file holds '{PREFIX}*' tensors")
    state = {}
    for path in files:
        if not path.is_file():
            raise UsageError(f"{path}: listed in the shard index but missing")
        state.update({k[len(PREFIX):]: v.contiguous() for k, v in read_tensors(path).items() if k.startswith(PREFIX)})
    if not state:
        raise UsageError(f"{files[0]}: no '{PREFIX}*' tensors (a Medusa-2 full model keeps its heads there)")
    hidden, heads, layers, vocab = medusa_layout(files[0], {k: (str(v.dtype), tuple(v.shape)) for k, v in state.items()})
    if hidden != cfg.get("hidden_size"):
        raise UsageError(f"{files[0]}: the heads are {hidden} wide, config.json's hidden_size is {cfg.get('hidden_size')}")
    said = cfg.get("medusa_num_heads")
    notes = [] if said == heads else [f"config.json said medusa_num_heads {said}; the weights hold {heads}"]
    dtypes = sorted({str(v.dtype).replace("torch.", "") for v in state.values()})
    target = str(src.resolve())
    new = {"medusa_num_heads": heads, "medusa_num_layers": layers, "hidden_size": hidden,
           "version": "1" if vocab is not None else "2", "architectures": ["MedusaHeads"],
           "specbench": {"kind": "medusa", "heads": heads, "layers": layers, "target": target,
                         "params": int(sum(v.numel() for v in state.values())),
                         "imported": {"from": src.name, "format": "Medusa-2 full model", "files": [f.name for f in files],
                                      "notes": notes + [f"run with --model {target} (the fine-tuned target)"],
                                      "dtypes": dtypes}}}
    write_heads_folder(out, "medusa", state, new, atomic=True)
    return {"kind": "medusa", "heads": heads, "layers": layers, "own_vocab": vocab, "target": target,
            "notes": new["specbench"]["imported"]["notes"], "dtypes": dtypes}


IMPORTER = Importer("medusa2-full", detect, convert)
