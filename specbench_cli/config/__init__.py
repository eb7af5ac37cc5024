"""The run's settings, one concern per module:

- `syntax`: words, ceilings and value parsers (budgets, temperatures, lists, -o);
- `instance`: a method instance (`pld@6`, `llama.cpp:ngram-mod@5`) parsed once;
- `declare`: how an option is declared (`option`, `Cli`, `GridKey`) and shared checks;
- `fields`: `RunConfig`, every option of `specbench run` declared once;
- `presets`: `--preset` and the quick tour; `engines`: the engine options' checks;
- `grid`: the sweep grid schema; `manifest`: the manifest's `config`, written and read back.

What the rest of the package imports from `specbench_cli.config` is re-exported here."""

from specbench_cli.config.declare import UNSET, Cli, GridKey, field_default, option
from specbench_cli.config.fields import RunConfig, at_temperature, flag_bounds, resume_normalisers, temperatures
from specbench_cli.config.grid import grid_schema
from specbench_cli.config.instance import MethodInstance, method_order, parse_instance, run_order
from specbench_cli.config.manifest import config_from_manifest, manifest_config
from specbench_cli.config.presets import PRESETS, TOUR, Preset, apply_preset, apply_tour
from specbench_cli.config.syntax import (
    ADAPTIVE,
    AR,
    AUTO,
    BATCH,
    BUDGET,
    CALIBRATION_TOKENS,
    DEFAULT_BUDGET,
    DEFAULT_CALIBRATION_QUESTIONS,
    MAX_BATCH,
    MAX_BUDGET,
    MAX_NEW_TOKENS,
    MAX_REPEATS,
    MAX_THREADS,
    NEW_TOKENS,
    REPEATS,
    SEED,
    TEMPERATURE,
    THREADS,
    Budget,
    Temperature,
    parse_bc,
    parse_candidates,
    parse_method_options,
    parse_temperatures,
    split_list,
)

__all__ = [
    "ADAPTIVE", "AR", "AUTO", "BATCH", "BUDGET", "CALIBRATION_TOKENS", "DEFAULT_BUDGET", "DEFAULT_CALIBRATION_QUESTIONS",
    "MAX_BATCH", "MAX_BUDGET", "MAX_NEW_TOKENS", "MAX_REPEATS", "MAX_THREADS", "NEW_TOKENS", "PRESETS", "REPEATS",
    "SEED", "TEMPERATURE", "THREADS", "TOUR", "UNSET", "Budget", "Cli", "GridKey", "MethodInstance", "Preset",
    "RunConfig", "Temperature", "apply_preset", "apply_tour", "at_temperature", "config_from_manifest",
    "field_default", "flag_bounds", "grid_schema", "manifest_config", "method_order", "option", "parse_bc",
    "parse_candidates", "parse_instance", "parse_method_options", "parse_temperatures", "resume_normalisers",
    "run_order", "split_list", "temperatures",
]
