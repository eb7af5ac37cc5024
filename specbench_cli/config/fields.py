"""Every option of `specbench run`, declared once.

`RunConfig` holds the options in sections (`cfg.task.limit`, `cfg.model.name`,
`cfg.decoding.temperature`, `cfg.budget.block_complexity`, `cfg.engines.url`, `cfg.output.dir`).
A run option is one field of a section: its type, its default, its check, and (in the field's
metadata, `declare.option`) how the command line spells it, how a sweep grid names it and its
flat name (the manifest's key: `model`, `engine_url`). `option_fields()` walks every option in
`ORDER`, and everything else is derived from these declarations through it:

- the parameters of `specbench run` (`cli/run.py` builds the command's signature from them);
- what `--resume` compares: a flag given with `--resume` is turned into the stored form by the
  same `Cli.to_config` the run uses, and compared with the manifest (`resume_normalisers`);
  fields declared `from_folder=False` (what starts a process, reaches the network or names a
  file to write) are never taken from the manifest on `--resume`, only from the command line
  (run/resume.py);
- the manifest round-trip (`manifest.py`): `config_from_manifest` type-checks every stored value
  against the field's annotation (`options.fits`, the type check method options use too) and
  rebuilds the same `RunConfig`;
- the sweep grid schema (`grid.py`, used by sweep/grid.py): keys, checks and defaults come from
  `GridKey` metadata (one key of a grid file; the grid itself is `sweep.grid.Grid`).

A new option is one new field of a section here, its flat name in `ORDER`. `tests/test_config.py`
checks that the four views agree.
The checks here need no model and no torch: `specbench run` rejects bad input before loading
anything. Checks that need the registries (method options, task names) and the method instances
are in `run/plan.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

from specbench_cli.config.declare import (
    Cli,
    GridKey,
    flat_name,
    grid_options,
    method_sets,
    one_of,
    option,
    str_list,
    whole,
)
from specbench_cli.config.engines import check_engine_bin, check_engine_timeout, check_engine_urls
from specbench_cli.config.presets import check_preset
from specbench_cli.config.syntax import (
    BATCH,
    CALIBRATION_TOKENS,
    DEFAULT_BUDGET,
    DEFAULT_CALIBRATION_QUESTIONS,
    NEW_TOKENS,
    REPEATS,
    SEED,
    THREADS,
    Budget,
    Temperature,
    one_temperature,
    parse_bc,
    parse_candidates,
    parse_method_options,
    parse_temperatures,
    split_list,
)
from specbench_cli.errors import UsageError, unknown
from specbench_cli.models.load import DEFAULT_MODEL, DTYPES, check_device
from specbench_cli.models.templates import check_template
from specbench_cli.options import Bound, is_int
from specbench_cli.targets.hf.forward.modes import check as check_forward
from specbench_cli.targets.hf.forward.modes import check_kernels


def _temperature(value: Any) -> Any:
    """A number, or (a sweep) a list of two or more distinct ones."""
    if isinstance(value, list):
        if len(value) < 2:
            raise UsageError(f"--temperature: a sweep needs two or more temperatures (got {value})")
        temps = [one_temperature(v) for v in value]
        if len(set(temps)) != len(temps):
            raise UsageError(f"--temperature {','.join(f'{t:g}' for t in temps)}: a temperature is given twice")
        return temps
    return one_temperature(value)


def _top_p(value: Any) -> Any:
    if not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UsageError(f"--top-p must be in (0, 1] (got {value})")
    return value


def _seed(value: Any) -> Any:
    if not is_int(value) or not SEED.holds(value):
        raise UsageError(f"--seed must be an integer {SEED.span()} (got {value})")
    return value


def _candidates(value: Any) -> Any:
    return None if value is None else parse_candidates(value)


def _target(value: Any) -> Any:
    from specbench_cli import targets

    if value not in targets.names():
        raise unknown("target", value, targets.names())
    return value


class Section:
    """A group of run options: each field is declared with `declare.option` and carries its own
    check."""

    def check(self, name: str) -> None:
        """The check of field `name` (its value normalised in place: '10' -> 10)."""
        check = self.__dataclass_fields__[name].metadata["check"]  # type: ignore[attr-defined]
        if check is not None:
            setattr(self, name, check(getattr(self, name)))

    def validate(self) -> None:
        """Every field's own check."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            self.check(f.name)


@dataclass
class TaskSection(Section):
    """Which questions a run asks: the task suites, their selection, and the column mapping of
    `hf:` tasks."""

    tasks: list[str] = option(
        factory=lambda: ["mini"],
        cli=Cli(("--tasks", "-t"), "Task suites (default: mini).", type=Optional[List[str]], default=None,
                to_config=lambda v: split_list(v) or ["mini"]),
        grid=GridKey("tasks", "a non-empty list of task names", expands=True, check=str_list))
    questions: Optional[str] = option(
        None, cli=Cli(("--questions",), "The questions file (or local copy) of a task that reads one: those with "
                      "'--questions' in `specbench list tasks`."),
        grid=GridKey("questions", "a path (string)"))
    categories: Optional[list[str]] = option(
        None, cli=Cli(("--categories",), "Only these categories (comma-separated).", type=Optional[List[str]],
                      to_config=split_list),
        grid=GridKey("categories", "a non-empty list of category names"))
    limit: Optional[int] = option(
        None, cli=Cli(("--limit",), "At most this many questions per category."), check=whole(Bound(1), "--limit"),
        grid=GridKey("limit", "an integer >= 1 (questions per category)"))
    question_ids: Optional[list[str]] = option(
        None, cli=Cli(("--question-ids",), "Only these question ids (comma-separated).", type=Optional[List[str]],
                      to_config=split_list))
    question_field: Optional[str] = option(
        None, cli=Cli(("--question-field",), "hf: tasks: the column holding the prompt (a string, a list of "
                      "turns, or a conversation); default: the first of turns, conversations, messages, question, "
                      "prompt, instruction, input, problem, text."),
        grid=GridKey("question_field", "a column name"))
    reference_field: Optional[str] = option(
        None, cli=Cli(("--reference-field",), "hf: tasks: the column of reference answers (scored with --scorer)."),
        grid=GridKey("reference_field", "a column name"))
    category_field: Optional[str] = option(
        None, cli=Cli(("--category-field",), "hf: tasks: the column to group rows by (default: one category "
                      "named after the dataset)."), grid=GridKey("category_field", "a column name"))
    id_field: Optional[str] = option(
        None, cli=Cli(("--id-field",), "hf: tasks: the column of unique ids (default: question_id or id, "
                      "else the row number)."), grid=GridKey("id_field", "a column name"))
    scorer: Optional[str] = option(
        None, cli=Cli(("--scorer",), "hf: tasks: how answers are scored against --reference-field (gsm8k, "
                      "humaneval; checked with the tasks)."), grid=GridKey("scorer", "gsm8k or humaneval"))


@dataclass
class ModelSection(Section):
    """The target (and draft) model: what it is, what computes its forwards and where, and how
    questions become its prompts."""

    name: str = option(DEFAULT_MODEL, flat="model",
                       cli=Cli(("--model", "-m"), "Alias, Hugging Face id, local folder or .gguf file."),
                       grid=GridKey("models", "a non-empty list of strings", expands=True))
    draft: Optional[str] = option(
        None, flat="draft_model",
        cli=Cli(("--draft-model",), "Draft model for sps (same kinds of reference as --model)."))
    target: str = option(
        "hf", cli=Cli(("--target",), "What computes the target's forwards: hf (a transformers model, on this "
                      "project's forwards, --forward) or a target an installed package registers (`specbench list "
                      "targets`). A method that needs what the target lacks (hidden states, embeddings) is refused "
                      "before any model loads."), check=_target)
    dtype: str = option("float32", cli=Cli(("--dtype",), "float32 (exact lossless check), bfloat16 or float16."),
                        check=one_of(DTYPES, "dtype"),
                        grid=GridKey("dtypes", f"a list drawn from {', '.join(DTYPES)}", expands=True))
    device: str = option("cpu", cli=Cli(("--device",), "cpu or cuda (cuda:N)."), check=check_device,
                         grid=GridKey("device", "a string such as 'cpu' or 'cuda'",  # checked where the job runs
                                      check=lambda v: isinstance(v, str) and bool(v.strip())))
    threads: Optional[int] = option(
        None, cli=Cli(("--threads",), "torch intra-op threads (default: min(cores, 2))."),
        check=whole(THREADS, "--threads"), grid=GridKey("threads", f"an integer {THREADS.span()}", default=1))
    forward: str = option(
        "auto", cli=Cli(("--forward",), "How the target computes a forward: auto (native for a Llama-architecture "
                        "target on CPU in float32 where a C compiler builds it, else lean; sdpa off CPU), sdpa, eager, "
                        "short (attention for few-token blocks), lean (fused Llama decoder + short) or native (lean "
                        "with decode and verify blocks in this project's C library); docs/performance.md. One for the whole run, AR included; "
                        "the manifest records the resolved one."), check=check_forward)
    kernels: str = option(
        "auto", cli=Cli(("--kernels",), "Matrix-product kernels of the lean forward: auto (each candidate timed "
                        "once on this CPU per weight shape and block size, cached), or one of mkl, mkl-t, mkl-wx, onednn, "
                        "onednn-t, onednn-packed, mkl-packed everywhere; docs/performance.md. The manifest records "
                        "the plan."), check=check_kernels)
    prompt_template: str = option(
        "auto", cli=Cli(("--prompt-template",), "How questions become prompts: auto (the tokenizer's chat template, "
                        "else plain), vicuna (Spec-Bench's), llama-2, llama-3, chatml, none, or a FILE.jinja."),
        check=check_template, grid=GridKey("prompt_template", "a template name or a .jinja path"))


@dataclass
class MethodsSection(Section):
    """The methods a run compares with AR, their options, and the preset that fills both."""

    names: list[str] = option(
        factory=list, flat="methods",  # empty: every registered method that needs no training (run/plan.py)
        cli=Cli(("--methods",), "Comma-separated method names (default: all that need no training). AR always "
                "runs as the baseline.", type=Optional[List[str]], default=None,
                to_config=lambda v: split_list(v) or []),
        grid=GridKey("methods", "a list of method names, or a list of such lists (one job per set)", expands=True,
                  check=method_sets))
    options: dict[str, dict[str, Any]] = option(
        factory=dict, flat="method_options",
        cli=Cli(("--option", "-o"), "Method option METHOD.KEY=VALUE (repeatable).", type=Optional[List[str]],
                default=None, to_config=parse_method_options, param="option"),
        grid=GridKey("options", "a table of method tables, e.g. [options.pld] max_ngram = 4", check=grid_options))
    preset: Optional[str] = option(
        None, cli=Cli(("--preset",), "A published benchmark's settings in one flag (spec-bench); explicit flags "
                      "override it; recorded in the manifest."), check=check_preset, grid=None)


@dataclass
class DecodingSection(Section):
    """How every method (AR included) decodes: sampling, length and batch size."""

    temperature: Temperature = option(
        0.0, cli=Cli(("--temperature",), "0 = greedy. Comma-separated (0,0.7,1): a sweep in one run, every method "
                     "and AR at each temperature, reported per temperature.", type=str, default="0",
                     to_config=parse_temperatures),
        check=_temperature)
    top_p: float = option(1.0, cli=Cli(("--top-p",), "Nucleus sampling mass (with --temperature > 0)."), check=_top_p)
    seed: int = option(0, cli=Cli(("--seed",), "Sampling seed."), check=_seed,
                       grid=GridKey("seed", f"an integer {SEED.span()}"))
    max_new_tokens: int = option(128, cli=Cli(("--max-new-tokens",), "Generation cap per turn."),
                                 check=whole(NEW_TOKENS, "--max-new-tokens"),
                                 grid=GridKey("max_new_tokens", f"an integer {NEW_TOKENS.span()}"))
    batch_size: int = option(
        1, cli=Cli(("--batch-size",), "Decode N questions at a time, one target forward per step over every live "
                   "sequence (1: one question at a time). AR runs at the same N as the baseline of every speedup; "
                   "docs/batch.md."),
        check=whole(BATCH, "--batch-size"),
        grid=GridKey("batch_sizes", "a non-empty list of integers >= 1 (one job per batch size)", expands=True))


@dataclass
class BudgetSection(Section):
    """The block complexity (tokens per target forward) and how 'auto' calibrates it."""

    block_complexity: Budget = option(
        DEFAULT_BUDGET,
        cli=Cli(("--block-complexity", "--bc"), "Max tokens the target processes per forward, root included; "
                "'auto': per method, the budget with the best predicted throughput on this device "
                "(docs/block-complexity-auto.md); 'adaptive': per step, the part of each draft with the best "
                "expected tokens per second (docs/adaptive-budget.md). A method listed as NAME@BC (pld@auto, "
                "pld@adaptive, pld@6) has its own.",
                type=str, default=str(DEFAULT_BUDGET), to_config=parse_bc),
        check=parse_bc,
        grid=GridKey("bcs", "a non-empty list of integers >= 1, \"auto\" or \"adaptive\" (docs/block-complexity-auto.md)",
                  expands=True))
    auto_candidates: Optional[list[int]] = option(
        None, cli=Cli(("--auto-candidates",), "Budgets 'auto' tries, comma-separated (default "
                      "1,2,3,4,6,8,12,16,24).", type=Optional[str], to_config=_candidates),
        check=_candidates)
    auto_questions: int = option(
        DEFAULT_CALIBRATION_QUESTIONS,
        cli=Cli(("--auto-questions",), "Calibration questions for 'auto' (from the mini suite, one per "
                "category, never reported)."), check=whole(Bound(1, 10_000), "--auto-questions"))
    auto_tokens: int = option(
        CALIBRATION_TOKENS,
        cli=Cli(("--auto-tokens",), "New tokens per calibration question for 'auto' (capped by --max-new-tokens)."),
        check=whole(NEW_TOKENS, "--auto-tokens"))


@dataclass
class EnginesSection(Section):
    """The engine methods' servers: the programs specbench starts, the servers others run, and
    the time one request may take."""

    bin: Optional[str] = option(
        None, flat="engine_bin",
        cli=Cli(("--engine-bin",), "llama.cpp's build (a prefix of tools/build-llama-cpp.sh, or its "
                "llama-server binary) for the engine methods llama.cpp:* (default: $SPECBENCH_LLAMA_CPP, "
                "the build script's prefix, then PATH); or ENGINE=PATH entries, comma-separated, e.g. "
                "vllm=VENV/bin/python for the vllm:* servers specbench starts; docs/engines.md. Never taken "
                "from a run folder: give it again with --resume."),
        check=check_engine_bin, from_folder=False)
    url: list[str] = option(
        factory=list, flat="engine_url",
        cli=Cli(("--engine-url",), "A server someone else runs for engine methods: URL (every engine method) or "
                "METHOD=URL (one method, e.g. vllm:ngram=http://127.0.0.1:8000); repeatable. Not started or "
                "stopped by specbench; docs/engines.md. Never taken from a run folder: give it again with "
                "--resume.", type=Optional[List[str]], default=None, to_config=lambda v: split_list(v) or []),
        check=check_engine_urls, from_folder=False)
    timeout: float = option(
        300.0, flat="engine_timeout",
        cli=Cli(("--engine-timeout",), "Seconds one engine request (or a server's start) may take before its row "
                "is an error row."), check=check_engine_timeout)


@dataclass
class MeasureSection(Section):
    """What a measurement repeats, warms up and times."""

    repeats: int = option(1, cli=Cli(("--repeats",), "Run everything N times (mean ± std of speedups in reports)."),
                          check=whole(REPEATS, "--repeats"),
                          grid=GridKey("repeats", f"an integer {REPEATS.span()}"))
    warmup: bool = option(True, cli=Cli(("--no-warmup",), "Skip the untimed warm-up generation.", type=bool,
                                        default=False, to_config=lambda v: not v, param="no_warmup"))
    time_steps: bool = option(False, cli=Cli(("--time-steps",), "Time each step's parts (propose, forward, accept, "
                                             "commit, observe) on CUDA too, with a sync after each part; on a "
                                             "CPU they are always timed (docs/metrics.md).", type=bool, default=False))


@dataclass
class OutputSection(Section):
    """Where the run folder is written."""

    dir: str = option("results", flat="output_dir",
                      cli=Cli(("--output-dir",), "Where run folders are created.", type=Path, default=Path("results"),
                              to_config=str))


def section(cls: type) -> Any:
    """A RunConfig field holding one section (`cls`, at its defaults unless given)."""
    return field(default_factory=cls, metadata={"section": cls})


@dataclass
class RunConfig:
    """Every setting of a run, in sections (`cfg.task.limit`, `cfg.model.name`,
    `cfg.decoding.temperature`). The manifest and sweep grids name each option by its flat name
    (`limit`, `model`, `temperature`): `option_fields`, `RunConfig.get`/`set`/`with_`/`from_flat`
    translate."""

    task: TaskSection = section(TaskSection)
    model: ModelSection = section(ModelSection)
    methods: MethodsSection = section(MethodsSection)
    decoding: DecodingSection = section(DecodingSection)
    budget: BudgetSection = section(BudgetSection)
    engines: EnginesSection = section(EnginesSection)
    measure: MeasureSection = section(MeasureSection)
    output: OutputSection = section(OutputSection)

    def validate(self) -> None:
        """Every field's own check, in the options' order (`ORDER`: the first bad value named is
        the same whatever section it is in). Needs no registry and no model; the method
        instances are parsed and checked against the other settings once, by planning
        (run/plan.py `method_instances`)."""
        for name, f in option_fields():
            getattr(self, name).check(f.name)

    def get(self, flat: str) -> Any:
        """The value of the option named `flat` (its manifest key, e.g. 'engine_url')."""
        name, f = _by_flat()[flat]
        return getattr(getattr(self, name), f.name)

    def set(self, flat: str, value: Any) -> None:
        """Set the option named `flat` (its manifest key) in its section."""
        name, f = _by_flat()[flat]
        setattr(getattr(self, name), f.name, value)

    def with_(self, **values: Any) -> "RunConfig":
        """A copy with the options named by flat name set to `values`; each section is a new
        object, the values themselves are shared (as `dataclasses.replace` shares them)."""
        new = type(self)(**{f.name: dataclasses.replace(getattr(self, f.name)) for f in dataclasses.fields(self)})
        for flat, value in values.items():
            new.set(flat, value)
        return new

    @classmethod
    def from_flat(cls, values: dict[str, Any]) -> "RunConfig":
        """The config whose options named by flat name (manifest keys) are `values`, the others
        at their defaults."""
        return cls().with_(**values)

    @classmethod
    def from_cli(cls, params: dict[str, Any]) -> "RunConfig":
        """The config the `run` command's parameter values (by parameter name) stand for."""
        values = {}
        for _, f in option_fields():
            cli = f.metadata["cli"]
            if cli.name in params:
                value = params[cli.name]
                values[flat_name(f)] = cli.to_config(value) if cli.to_config else value
        return cls.from_flat(values)


# The options by flat name, in the order the manifest's `config`, the `run` command's parameters
# and the sweep grid's keys list them.
ORDER = (
    "model", "methods", "method_options", "tasks", "questions", "categories", "limit", "question_ids",
    "question_field", "reference_field", "category_field", "id_field", "scorer", "block_complexity", "batch_size",
    "max_new_tokens", "dtype", "device", "threads", "temperature", "top_p", "seed", "repeats", "warmup",
    "time_steps", "draft_model", "engine_bin", "engine_url", "engine_timeout", "output_dir", "auto_candidates",
    "auto_questions", "auto_tokens", "preset", "prompt_template", "target", "forward", "kernels",
)


def option_fields() -> Iterator[tuple[str, dataclasses.Field]]:
    """(section name, field) of every run option, in `ORDER`: what the command line, `--resume`,
    the manifest and the sweep grid derive from."""
    by_flat = _by_flat()
    for flat in ORDER:
        yield by_flat[flat]


@functools.cache
def section_hints(name: str) -> dict[str, Any]:
    """The resolved annotations of section `name`'s fields."""
    return typing.get_type_hints(RunConfig.__dataclass_fields__[name].metadata["section"])


@functools.cache
def _by_flat() -> dict[str, tuple[str, dataclasses.Field]]:
    """Flat name -> (section name, field), for every field of every section."""
    found = {}
    for s in dataclasses.fields(RunConfig):
        for f in dataclasses.fields(s.metadata["section"]):
            found[flat_name(f)] = (s.name, f)
    if set(found) != set(ORDER) or len(ORDER) != len(set(ORDER)):
        raise AssertionError(f"config ORDER and the section fields differ: {sorted(set(found) ^ set(ORDER))}")
    return found


def temperatures(cfg: RunConfig) -> list[float]:
    """The temperatures a run decodes at, in the order given (one for most runs)."""
    t = cfg.decoding.temperature
    return list(t) if isinstance(t, list) else [t]


def at_temperature(cfg: RunConfig, t: float) -> RunConfig:
    """The run's settings at one temperature of its sweep: what planning, binding and decoding
    see (`cfg` itself when it holds that one temperature only)."""
    return cfg if cfg.decoding.temperature == t else cfg.with_(temperature=t)


def flag_bounds() -> dict[str, Bound]:
    """Run flag -> its declared bound, for every whole-number option: the command line's first
    check of number options words a refusal with the option's own bound (`--batch-size -1`:
    "between 1 and 256", not ">= 0")."""
    bounds = {}
    for _, f in option_fields():
        bound = getattr(f.metadata.get("check"), "bound", None)
        if bound is not None:
            bounds.update({flag: bound for flag in f.metadata["cli"].flags})
    return bounds


def resume_normalisers() -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """`run` parameter -> (the option's flat name, parameter value -> stored value): what `--resume` compares."""
    return {f.metadata["cli"].name: (flat_name(f), f.metadata["cli"].to_config or (lambda v: v))
            for _, f in option_fields()}
