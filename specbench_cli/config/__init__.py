"""The run's settings, one concern per module:

- `syntax`: words, ceilings and value parsers (budgets, temperatures, lists, -o);
- `instance`: a method instance (`pld@6`, `llama.cpp:ngram-mod@5`) parsed once;
- `declare`: how an option is declared (`option`, `Cli`, `GridKey`) and shared checks;
- `fields`: `RunConfig` and its sections, every option of `specbench run` declared once
  (`option_fields` walks them);
- `presets`: `--preset` and the quick tour; `engines`: the engine options' checks;
- `grid`: the sweep grid schema; `manifest`: the manifest's `config`, written and read back.

What the rest of the package imports from `specbench_cli.config` is re-exported here."""

from specbench_cli.config.declare import UNSET, Cli, GridKey, field_default, flat_name, option
from specbench_cli.config.fields import (
    ORDER,
    BudgetSection,
    DecodingSection,
    EnginesSection,
    MeasureSection,
    MethodsSection,
    ModelSection,
    OutputSection,
    RunConfig,
    Section,
    TaskSection,
    at_temperature,
    flag_bounds,
    option_fields,
    resume_normalisers,
    temperatures,
)
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
    "MAX_BATCH", "MAX_BUDGET", "MAX_NEW_TOKENS", "MAX_REPEATS", "MAX_THREADS", "NEW_TOKENS", "ORDER", "PRESETS",
    "REPEATS", "SEED", "TEMPERATURE", "THREADS", "TOUR", "UNSET", "Budget", "BudgetSection", "Cli",
    "DecodingSection", "EnginesSection", "GridKey", "MeasureSection", "MethodInstance", "MethodsSection",
    "ModelSection", "OutputSection", "Preset", "RunConfig", "Section", "TaskSection", "Temperature", "apply_preset",
    "apply_tour", "at_temperature", "config_from_manifest", "field_default", "flag_bounds", "flat_name",
    "grid_schema", "manifest_config", "method_order", "option", "option_fields", "parse_bc",
    "parse_candidates", "parse_instance", "parse_method_options", "parse_temperatures", "resume_normalisers",
    "run_order", "split_list", "temperatures",
]
