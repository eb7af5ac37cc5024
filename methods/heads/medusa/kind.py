"""Medusa heads (methods/heads/model.py `MedusaHeads`): FasterDecoding's v2 / TGI keys
(`{head}.{layer}.linear.*`, projecting through the target's LM head) or Medusa-1's own
per-head projections (`{head}.{layers}.weight` [V, h]). The head and layer counts come from the
tensor keys (published configs can lie about them), so the config is not checked here and the
widths are checked once the target is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.kinds import HeadKind, heads_and_layers

FILE = "medusa_lm_head.safetensors"


def layout(path: Path, found: dict) -> tuple[int, int, int, int | None]:
    """(hidden, heads, layers, own vocabulary or None) from Medusa keys: `{head}.{layer}.linear.*`
    (v2 / TGI), plus `{head}.{layers}.weight` [V, h] per head (Medusa-1's own projections)."""
    blocks, projections = [], []
    for key in found:
        parts = key.split(".")
        if len(parts) == 4 and parts[2] == "linear" and parts[0].isdigit() and parts[1].isdigit():
            blocks.append((int(parts[0]), int(parts[1])))
        elif len(parts) == 3 and parts[2] == "weight" and parts[0].isdigit() and parts[1].isdigit():
            projections.append((int(parts[0]), int(parts[1])))
        else:
            raise UsageError(f"{path}: tensor '{key}' is not a Medusa key ({{head}}.{{layer}}.linear.* or "
                             f"{{head}}.{{layers}}.weight)")
    if "0.0.linear.weight" not in found:
        raise UsageError(f"{path}: missing tensor '0.0.linear.weight'")
    hidden = found["0.0.linear.weight"][1][0]
    heads, layers = 1 + max(p[0] for p in blocks), 1 + max(p[1] for p in blocks)
    vocab = None
    if projections:
        if any(j != layers for _, j in projections):
            raise UsageError(f"{path}: tensor '{projections[0][0]}.{projections[0][1]}.weight' is not after the last "
                             f"block (Medusa-1 projections are {{head}}.{layers}.weight)")
        vocab = found[f"0.{layers}.weight"][1][0] if f"0.{layers}.weight" in found else None
        if vocab is None:
            raise UsageError(f"{path}: missing tensor '0.{layers}.weight'")
    return hidden, heads, layers, vocab


def _build(cfg: dict, header: dict, path: Path, target_config: Any = None):
    from specbench_cli.methods.heads.model import MedusaHeads

    return MedusaHeads(*layout(path, header))


def _fit(head: Any, model: Any, folder: Path) -> tuple[int, int | None, bool]:
    # heads trained here share the target's LM head; published Medusa-1 heads have their own
    return int(head[0][0].linear.weight.shape[0]), head.own_vocab, head.own_vocab is not None


KIND = HeadKind(
    name="medusa", weights=FILE,
    claims=lambda folder, cfg: (folder / FILE).is_file(),
    check_config=lambda cfg, path: None,
    build=_build, fit=_fit,
    header_sizes=lambda cfg: [],  # its widths come from its tensors, checked once the target is loaded
    shape=heads_and_layers("medusa"), train_flags=" --heads-count 3",
    trainer="specbench_cli.training.heads.hooks:MEDUSA",
    # medusa2 (a full model with heads inside) first: like EAGLE's folders it has config.json + model weights
    importers=("specbench_cli.methods.heads.medusa.importer_medusa2",
               "specbench_cli.methods.heads.medusa.importer"),
)
