"""The run settings a manifest records (`config`): read back, type-checked, as the RunConfig
that wrote them."""

from __future__ import annotations

import dataclasses
import typing

from specbench_cli.config.fields import RunConfig
from specbench_cli.config.syntax import parse_bc
from specbench_cli.errors import UsageError
from specbench_cli.options import fits, hint_name


def config_from_manifest(manifest: dict, where: str = "manifest") -> RunConfig:
    """The RunConfig a manifest records; a UsageError naming `where` and the key when `config`
    is not an object or a value does not have its field's type (checked from the annotations)."""
    config = manifest.get("config", {})
    if not isinstance(config, dict):
        raise UsageError(f"{where}: 'config' must be an object, got {type(config).__name__}")
    hints = typing.get_type_hints(RunConfig)
    values = {}
    for f in dataclasses.fields(RunConfig):
        if f.name in config:
            if not fits(config[f.name], hints[f.name]):
                raise UsageError(f"{where}: 'config.{f.name}' must be {hint_name(hints[f.name])}, "
                                 f"got {type(config[f.name]).__name__} {str(config[f.name])[:40]!r}")
            values[f.name] = config[f.name]
    if "block_complexity" in values:  # int | str admits any string: only a number or 'auto' is one
        values["block_complexity"] = parse_bc(values["block_complexity"], f"{where}: 'config.block_complexity'")
    return RunConfig(**values)


def manifest_config(cfg: RunConfig) -> dict:
    """The manifest's `config` object of a run: every RunConfig field by name, in field order."""
    return dataclasses.asdict(cfg)
