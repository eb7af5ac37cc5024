"""The run settings a manifest records (`config`, one flat object keyed by the options' flat
names): written from a RunConfig, and read back, type-checked, as the RunConfig that wrote them."""

from __future__ import annotations

import copy

from specbench_cli.config.declare import flat_name
from specbench_cli.config.fields import RunConfig, option_fields, section_hints
from specbench_cli.config.syntax import parse_bc
from specbench_cli.errors import UsageError
from specbench_cli.options import fits, hint_name


def config_from_manifest(manifest: dict, where: str = "manifest") -> RunConfig:
    """The RunConfig a manifest records; a UsageError naming `where` and the key when `config`
    is not an object or a value does not have its field's type (checked from the annotations)."""
    config = manifest.get("config", {})
    if not isinstance(config, dict):
        raise UsageError(f"{where}: 'config' must be an object, got {type(config).__name__}")
    values = {}
    for section, f in option_fields():
        key, hint = flat_name(f), section_hints(section)[f.name]
        if key in config:
            if not fits(config[key], hint):
                raise UsageError(f"{where}: 'config.{key}' must be {hint_name(hint)}, "
                                 f"got {type(config[key]).__name__} {str(config[key])[:40]!r}")
            values[key] = config[key]
    if "block_complexity" in values:  # int | str admits any string: only a number or 'auto' is one
        values["block_complexity"] = parse_bc(values["block_complexity"], f"{where}: 'config.block_complexity'")
    return RunConfig.from_flat(values)


def manifest_config(cfg: RunConfig) -> dict:
    """The manifest's `config` object of a run: every option by its flat name, in `ORDER`
    (each value a deep copy)."""
    return {flat_name(f): copy.deepcopy(getattr(getattr(cfg, section), f.name)) for section, f in option_fields()}
