"""EAGLE-3 heads (methods/heads/eagle3/model.py `Eagle3Head`): one decoder layer over three target
layers' features, its own draft vocabulary mapped to target ids (`d2t` / `t2d`); stored like
EAGLE's (`model.safetensors`, a Llama-style config) with `draft_vocab_size`, which tells the two
apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.eagle.kind import FIELDS as EAGLE_FIELDS
from specbench_cli.methods.heads.eagle.kind import FILE, check_fields, layers_shape, llama_config
from specbench_cli.methods.heads.kinds import HeadKind

FIELDS = {**EAGLE_FIELDS, "draft_vocab_size": (int, True), "target_hidden_size": (int, False)}


def _check(cfg: dict, path: Path) -> None:
    check_fields(cfg, path, FIELDS)
    layers = cfg.get("feature_layers")
    if layers is not None and not (isinstance(layers, list) and len(layers) == 3 and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)):
        raise UsageError(f"{path}: 'feature_layers' must be three layer indices, got {json.dumps(layers)}")
    if cfg["num_hidden_layers"] != 1:
        raise UsageError(f"{path}: an EAGLE-3 head has one layer (num_hidden_layers 1), got "
                         f"{cfg['num_hidden_layers']}")


def _build(cfg: dict, header: dict, path: Path, target_config: Any = None):
    from specbench_cli.methods.heads.eagle3.model import Eagle3Head

    return Eagle3Head(llama_config(cfg))


def _fit(head: Any, target: Any, folder: Path) -> tuple[int, int | None, bool]:
    # its features are 3 target states wide; its vocabulary maps through t2d
    head.feature_layers(int(target.config.num_hidden_layers))  # every layer it reads exists
    vocab = target.vocab_size
    if int(head.draft_ids.max()) >= vocab:
        raise UsageError(f"heads {folder}: d2t maps draft tokens past the target's vocabulary ({vocab})")
    return head.target_hidden, int(head.t2d.shape[0]), True


KIND = HeadKind(
    name="eagle3", weights=FILE,
    claims=lambda folder, cfg: (folder / FILE).is_file() and "num_hidden_layers" in cfg and "draft_vocab_size" in cfg,
    check_config=_check, build=_build, fit=_fit,
    header_sizes=lambda cfg: [("target_hidden_size" if "target_hidden_size" in cfg else "hidden_size", "hidden"),
                              ("vocab_size", "vocab")],
    shape=layers_shape, train_flags=" --ttt-steps 7",
    trainer="specbench_cli.training.heads.eagle3:HOOKS",
    importers=("specbench_cli.methods.heads.eagle3.importer",),
)
