"""Every option of `specbench run`, declared once.

A run option is one `RunConfig` field: its type, its default, its check, and (in the field's
metadata) how the command line spells it and how a sweep grid names it. Everything else is
derived from these declarations:

- the parameters of `specbench run` (`cli/run.py` builds the command's signature from them);
- what `--resume` compares: a flag given with `--resume` is turned into the stored form by the
  same `Cli.to_config` the run uses, and compared with the manifest (`resume_normalisers`);
  fields declared `from_folder=False` (what starts a process, reaches the network or names a
  file to write) are never taken from the manifest on `--resume`, only from the command line
  (run/resume.py);
- the manifest round-trip: `config_from_manifest` type-checks every stored value against the
  field's annotation (`options.fits`, the type check method options use too) and rebuilds the
  same `RunConfig`;
- the sweep grid schema (`sweep/grid.py`): keys, checks and defaults come from `GridKey` metadata
  (one key of a grid file; the grid itself is `sweep.grid.Grid`).

A new option is one new field here. `tests/test_config.py` checks that the four views agree.
The checks here need no model and no torch: `specbench run` rejects bad input before loading
anything. Checks that need the registries (method options, task names) are in `run/plan.py`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional, Union

from specbench_cli.engine.forward.modes import check as check_forward
from specbench_cli.engine.forward.modes import check_kernels
from specbench_cli.errors import UsageError, unknown
from specbench_cli.models.load import DEFAULT_MODEL, DTYPES, check_device
from specbench_cli.models.templates import check_template
from specbench_cli.options import Bound, fits, hint_name, is_int, strip_optional

AUTO = "auto"
ADAPTIVE = "adaptive"
AR = "ar"
DEFAULT_BUDGET = 10
# Ceilings that hold before the model (and its context length) is known: they keep planning and
# memory bounded whatever is typed; the model's context is checked once it is read (run/limits.py).
MAX_BUDGET = 4096                   # tokens per forward (Spec-Bench's largest trees use 64)
MAX_NEW_TOKENS = 1_000_000          # per turn
MAX_REPEATS = 10_000
MAX_THREADS = 4096
MAX_BATCH = 256                     # sequences decoded together (the KV cache's memory is checked too: run/limits.py)
DEFAULT_CALIBRATION_QUESTIONS = 6   # one per mini category: acceptance differs by kind of text
CALIBRATION_TOKENS = 32             # new tokens per calibration question (first turn only)

# Each bound declared once, as a `Bound` (options.py): it checks a value and words the refusal.
BUDGET = Bound(1, MAX_BUDGET)
NEW_TOKENS = Bound(1, MAX_NEW_TOKENS)
REPEATS = Bound(1, MAX_REPEATS)
THREADS = Bound(1, MAX_THREADS)
BATCH = Bound(1, MAX_BATCH)
TEMPERATURE = Bound(0, finite=True)
Budget = Union[int, str]            # a number of tokens, "auto" or "adaptive"
Temperature = Union[float, List[float]]  # one temperature, or a sweep inside one run (--temperature 0,0.7,1)
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()  # "not given" in Cli / GridKey


# ----------------------------------------------------------------------------- value syntax

def parse_bc(value: Any, flag: str = "--block-complexity") -> Budget:
    """'auto', 'adaptive' or a whole number >= 1 (as int); UsageError otherwise."""
    if isinstance(value, str) and value.strip().lower() in (AUTO, ADAPTIVE):
        return value.strip().lower()
    try:
        bc = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{flag} must be a whole number, 'auto' or 'adaptive' (got '{value}')") from None
    return BUDGET.check(bc, flag)


def parse_candidates(values: Any) -> list[int]:
    """Sorted distinct budgets from a list (or a comma-separated string) of whole numbers >= 1."""
    items = values.split(",") if isinstance(values, str) else list(values)
    out = set()
    for v in items:
        b = parse_bc(v, "--auto-candidates")
        if not isinstance(b, int):
            raise UsageError(f"--auto-candidates takes numbers, not '{b}'")
        out.add(b)
    if not out:
        raise UsageError("--auto-candidates needs at least one budget")
    return sorted(out)


def parse_spec(spec: str) -> tuple[str, Optional[Budget]]:
    """'pld' -> ('pld', None); 'pld@auto' -> ('pld', 'auto'); 'pld@6' -> ('pld', 6);
    'pld@adaptive' -> ('pld', 'adaptive')."""
    if "@" not in spec:
        return spec, None
    base, raw = spec.split("@", 1)
    if not base:
        raise UsageError(f"method '{spec}': expected NAME@BC (a number, 'auto' or 'adaptive')")
    if base == AR:
        raise UsageError(f"method '{spec}': ar ignores the block complexity; list it as 'ar'")
    return base, parse_bc(raw, flag=f"method '{spec}': the BC after '@'")


def method_order(names: list[str]) -> list[str]:
    """AR first (the baseline), then the rest in the given order, without duplicates; an engine's
    own AR (`llama.cpp:ar`) before the first of its engine methods (engines/naming.py)."""
    for n in names:
        parse_spec(n)  # NAME@BC must be well formed (and not ar@...)
    from specbench_cli.engines.naming import with_baselines  # ENGINE:ar joins any ENGINE:METHOD

    return [AR] + [n for n in with_baselines(names) if n != AR]


def split_list(values: Optional[List[str]]) -> Optional[list[str]]:
    """Repeated and comma-separated CLI values as one list; None when nothing is left."""
    if not values:
        return None
    items = [v.strip() for raw in values for v in raw.split(",") if v.strip()]
    return items or None


def parse_method_options(values: Optional[List[str]]) -> dict[str, dict[str, str]]:
    """['pld.max_ngram=4', ...] -> {'pld': {'max_ngram': '4'}}."""
    opts: dict[str, dict[str, str]] = {}
    for raw in values or []:
        if "=" not in raw or "." not in raw.split("=", 1)[0]:
            raise UsageError(f"--option expects METHOD.KEY=VALUE, got '{raw}'")
        lhs, value = raw.split("=", 1)
        method, key = lhs.rsplit(".", 1)  # the last dot: engine methods have dots (llama.cpp:draft.n_max)
        if not value.strip():
            raise UsageError(f"--option {raw}: no value after '=' (METHOD.KEY=VALUE)")
        given = opts.setdefault(method.strip(), {})
        if key.strip() in given:  # the last one silently won: say which of two values is meant
            raise UsageError(f"--option {method.strip()}.{key.strip()} given twice ({given[key.strip()]} and "
                             f"{value.strip()}); give it once")
        given[key.strip()] = value.strip()
    return opts


# ----------------------------------------------------------------------------- declarations

@dataclass(frozen=True)
class Cli:
    """How `specbench run` spells a field."""

    flags: tuple[str, ...]
    help: str
    type: Any = None                                # the parameter's annotation (default: the field's)
    default: Any = UNSET                            # the parameter's default (default: the field's)
    to_config: Optional[Callable[[Any], Any]] = None  # parameter value -> stored value (default: as is)
    param: Optional[str] = None                     # the parameter's name (default: from the first flag)

    @property
    def name(self) -> str:
        return self.param or self.flags[0].lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class GridKey:
    """How a sweep grid (GRID.toml) names a field. `expands`: the key takes a list and the grid
    has one job per value; otherwise one value applies to every job."""

    key: str
    wants: str
    expands: bool = False
    default: Any = UNSET                            # the grid's default when it differs from the run's
    check: Optional[Callable[[Any], bool]] = None   # the whole TOML value (default: derived from the field)


def option(default: Any = MISSING, *, factory: Optional[Callable[[], Any]] = None, cli: Cli,
           check: Optional[Callable[[Any], Any]] = None, grid: Optional[GridKey] = None,
           from_folder: bool = True) -> Any:
    """A RunConfig field. `check(value)` raises UsageError for a bad value (and may return a
    normalised one, e.g. '10' -> 10); it runs in `RunConfig.validate` and on grid values.
    `from_folder=False`: the field starts a process, reaches the network or names a file to
    write, so `--resume` never takes it from the run folder's manifest, only from the command
    line (run/resume.py; the manifest still records it)."""
    meta = {"cli": cli, "check": check, "grid": grid, "from_folder": from_folder}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _whole(bound: Bound, flag: str) -> Callable[[Any], Any]:
    """The check of a whole-number option within `bound` (None: not given); it carries the bound
    (`flag_bounds`)."""
    def check(value: Any) -> Any:
        if value is not None and (not is_int(value) or not bound.holds(value)):
            raise bound.refusal(value, flag)
        return value
    check.bound = bound  # type: ignore[attr-defined]
    return check


def flag_bounds() -> dict[str, Bound]:
    """Run flag -> its declared bound, for every whole-number option: the command line's first
    check of number options words a refusal with the option's own bound (`--batch-size -1`:
    "between 1 and 256", not ">= 0")."""
    bounds = {}
    for f in dataclasses.fields(RunConfig):
        bound = getattr(f.metadata.get("check"), "bound", None)
        if bound is not None:
            bounds.update({flag: bound for flag in f.metadata["cli"].flags})
    return bounds


def _one_of(choices: tuple[str, ...], what: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in choices:
            raise unknown(what, value, choices)
        return value
    return check


def _one_temperature(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TEMPERATURE.refusal(value, "--temperature")
    return TEMPERATURE.check(value, "--temperature")


def parse_temperatures(value: Any) -> Temperature:
    """'0.7' -> 0.7; '0,0.7,1' -> [0.0, 0.7, 1.0] (a sweep inside one run); UsageError for an
    item that is not a finite number >= 0, an empty item or a value given twice."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _one_temperature(float(value))
    items = [v.strip() for v in str(value).split(",")]
    if any(not v for v in items):
        raise UsageError(f"--temperature {value}: an empty item (comma-separated numbers >= 0, e.g. 0,0.7,1)")
    temps = []
    for item in items:
        try:
            t = float(item)
        except ValueError:
            raise TEMPERATURE.refusal(item, "--temperature") from None
        t = _one_temperature(t)
        if t in temps:
            raise UsageError(f"--temperature {value}: {item} is given twice; give each temperature once")
        temps.append(t)
    return temps[0] if len(temps) == 1 else temps


def _temperature(value: Any) -> Any:
    """A number, or (a sweep) a list of two or more distinct ones."""
    if isinstance(value, list):
        if len(value) < 2:
            raise UsageError(f"--temperature: a sweep needs two or more temperatures (got {value})")
        temps = [_one_temperature(v) for v in value]
        if len(set(temps)) != len(temps):
            raise UsageError(f"--temperature {','.join(f'{t:g}' for t in temps)}: a temperature is given twice")
        return temps
    return _one_temperature(value)


def temperatures(cfg: "RunConfig") -> list[float]:
    """The temperatures a run decodes at, in the order given (one for most runs)."""
    t = cfg.temperature
    return list(t) if isinstance(t, list) else [t]


def at_temperature(cfg: "RunConfig", t: float) -> "RunConfig":
    """The run's settings at one temperature of its sweep: what planning, binding and decoding
    see (`cfg` itself when it holds that one temperature only)."""
    return cfg if cfg.temperature == t else dataclasses.replace(cfg, temperature=t)


def _top_p(value: Any) -> Any:
    if not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UsageError(f"--top-p must be in (0, 1] (got {value})")
    return value


SEED = Bound(-(1 << 63), (1 << 64) - 1)  # what torch.manual_seed accepts


def _seed(value: Any) -> Any:
    if not is_int(value) or not SEED.holds(value):
        raise UsageError(f"--seed must be an integer {SEED.span()} (got {value})")
    return value


def _candidates(value: Any) -> Any:
    return None if value is None else parse_candidates(value)


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) and x.strip() for x in v)


def _method_sets(v: Any) -> bool:
    """A flat list of names (one set) or a list of non-empty name lists (several sets)."""
    return _str_list(v) or (isinstance(v, list) and bool(v) and all(_str_list(x) for x in v))


def _grid_options(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(opts, dict) and all(isinstance(x, (str, int, float, bool)) for x in opts.values())
        for opts in v.values())


# ----------------------------------------------------------------------------- presets

@dataclass(frozen=True)
class Preset:
    """Settings of a published benchmark in one flag: run fields, and per method a block
    complexity (None: the run's) and options. Anything the user gives explicitly wins."""

    summary: str
    run: dict
    methods: dict  # name -> (BC or None, {option: value})


PRESETS = {
    # Spec-Bench (hemingkx/Spec-Bench, eval.sh and evaluation/inference_*.py): Vicuna's fastchat
    # template, greedy, 1024 new tokens, float16; EAGLE-2 total_token 60, depth 5 (EAGLE counts the
    # levels after the first: our 6), top_k 10; Medusa-1 and Hydra on mc_sim_7b_63 (64 tokens); EAGLE-1 on its
    # 25-node tree when asked for with eagle.tree; Lookahead level 5, window 7, guess 7; PLD
    # max_ngram 3 with 10 tokens. docs/presets.md lists them next to the leaderboard.
    "spec-bench": Preset(
        "Spec-Bench's settings: vicuna template, 1024 new tokens, float16, per-method trees",
        run={"prompt_template": "vicuna", "max_new_tokens": 1024, "dtype": "float16", "temperature": 0.0},
        methods={"eagle": (60, {"depth": 6, "top_k": 10}), "medusa": (64, {"choices": "mc_sim_7b_63"}),
                 "hydra": (64, {"choices": "mc_sim_7b_63"}),
                 "lookahead": (None, {"N": 5, "W": 7, "G": 7}), "pld": (11, {"max_ngram": 3, "num_pred_tokens": 10})}),
}


def _target(value: Any) -> Any:
    from specbench_cli import targets

    if value not in targets.names():
        raise unknown("target", value, targets.names())
    return value


def _preset(value: Any) -> Any:
    if value is not None and value not in PRESETS:
        raise unknown("preset", value, tuple(PRESETS))
    return value


# `specbench run` with no --tasks (README command 1) is a quick tour of the default suite: every
# training-free method on one `mini` question per category at 64 new tokens, a few minutes on a
# 2-core CPU; naming the suite (`--tasks mini`) runs all of it at the usual 128 tokens.
TOUR = {"limit": 1, "max_new_tokens": 64}


def apply_tour(cfg: "RunConfig", given: set[str]) -> bool:
    """Give a run without --tasks the tour's limit and length where the user set neither
    (CLI parameter names in `given`); True when anything changed."""
    changed = False
    for name, value in TOUR.items():
        if name not in given and getattr(cfg, name) == field_default_of(name):
            setattr(cfg, name, value)
            changed = True
    return changed


def field_default_of(name: str) -> Any:
    f = next(f for f in dataclasses.fields(RunConfig) if f.name == name)
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]


def _engine_urls(values: Any) -> list[str]:
    """--engine-url values: URL or METHOD=URL, each URL http(s)://..."""
    values = list(values or [])
    for v in values:
        url = v.split("=", 1)[1] if "=" in v.split("://", 1)[0] else v
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--engine-url {v}: expected URL or METHOD=URL with an http:// or https:// URL")
    return values


def _engine_bin(value: Optional[str]) -> Optional[str]:
    from specbench_cli.engines.locate import split_engine_bin

    split_engine_bin(value)  # ENGINE=PATH with an unknown engine: one line, exit 2
    return value


def _engine_timeout(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 86400:
        raise UsageError(f"--engine-timeout must be a number of seconds in (0, 86400] (got {value})")
    return float(value)


def apply_preset(cfg: "RunConfig", given: set[str]) -> None:
    """Fill `cfg` from its preset where the user gave nothing: run fields not in `given` (field
    names set explicitly), each listed method's BC (as NAME@BC, unless --bc or NAME@BC was given)
    and its options (unless given with -o)."""
    preset = PRESETS[_preset(cfg.preset)]
    for name, value in preset.run.items():
        if name not in given:
            setattr(cfg, name, value)
    specs = []
    for spec in cfg.methods:
        base, bc = parse_spec(spec)
        budget, options = preset.methods.get(base, (None, {}))
        if bc is None and budget is not None and "block_complexity" not in given:
            spec = f"{base}@{budget}"
        for key, value in options.items():
            cfg.method_options.setdefault(base, {}).setdefault(key, value)
        specs.append(spec)
    cfg.methods = specs


@dataclass
class RunConfig:
    model: str = option(DEFAULT_MODEL, cli=Cli(("--model", "-m"), "Alias, Hugging Face id, local folder or .gguf file."),
                        grid=GridKey("models", "a non-empty list of strings", expands=True))
    methods: list[str] = option(
        factory=list,  # empty: every registered method that needs no training (run/plan.py)
        cli=Cli(("--methods",), "Comma-separated method names (default: all that need no training). AR always "
                "runs as the baseline.", type=Optional[List[str]], default=None,
                to_config=lambda v: split_list(v) or []),
        grid=GridKey("methods", "a list of method names, or a list of such lists (one job per set)", expands=True,
                  check=_method_sets))
    method_options: dict[str, dict[str, Any]] = option(
        factory=dict,
        cli=Cli(("--option", "-o"), "Method option METHOD.KEY=VALUE (repeatable).", type=Optional[List[str]],
                default=None, to_config=parse_method_options, param="option"),
        grid=GridKey("options", "a table of method tables, e.g. [options.pld] max_ngram = 4", check=_grid_options))
    tasks: list[str] = option(
        factory=lambda: ["mini"],
        cli=Cli(("--tasks", "-t"), "Task suites (default: mini).", type=Optional[List[str]], default=None,
                to_config=lambda v: split_list(v) or ["mini"]),
        grid=GridKey("tasks", "a non-empty list of task names", expands=True, check=_str_list))
    questions: Optional[str] = option(
        None, cli=Cli(("--questions",), "The questions file (or local copy) of a task that reads one: those with "
                      "'--questions' in `specbench list tasks`."),
        grid=GridKey("questions", "a path (string)"))
    categories: Optional[list[str]] = option(
        None, cli=Cli(("--categories",), "Only these categories (comma-separated).", type=Optional[List[str]],
                      to_config=split_list),
        grid=GridKey("categories", "a non-empty list of category names"))
    limit: Optional[int] = option(
        None, cli=Cli(("--limit",), "At most this many questions per category."), check=_whole(Bound(1), "--limit"),
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
    batch_size: int = option(
        1, cli=Cli(("--batch-size",), "Decode N questions at a time, one target forward per step over every live "
                   "sequence (1: one question at a time). AR runs at the same N as the baseline of every speedup; "
                   "docs/batch.md."),
        check=_whole(BATCH, "--batch-size"),
        grid=GridKey("batch_sizes", "a non-empty list of integers >= 1 (one job per batch size)", expands=True))
    max_new_tokens: int = option(128, cli=Cli(("--max-new-tokens",), "Generation cap per turn."),
                                 check=_whole(NEW_TOKENS, "--max-new-tokens"),
                                 grid=GridKey("max_new_tokens", f"an integer {NEW_TOKENS.span()}"))
    dtype: str = option("float32", cli=Cli(("--dtype",), "float32 (exact lossless check), bfloat16 or float16."),
                        check=_one_of(DTYPES, "dtype"),
                        grid=GridKey("dtypes", f"a list drawn from {', '.join(DTYPES)}", expands=True))
    device: str = option("cpu", cli=Cli(("--device",), "cpu or cuda (cuda:N)."), check=check_device,
                         grid=GridKey("device", "a string such as 'cpu' or 'cuda'",  # checked where the job runs
                                      check=lambda v: isinstance(v, str) and bool(v.strip())))
    threads: Optional[int] = option(
        None, cli=Cli(("--threads",), "torch intra-op threads (default: min(cores, 2))."),
        check=_whole(THREADS, "--threads"), grid=GridKey("threads", f"an integer {THREADS.span()}", default=1))
    temperature: Temperature = option(
        0.0, cli=Cli(("--temperature",), "0 = greedy. Comma-separated (0,0.7,1): a sweep in one run, every method "
                     "and AR at each temperature, reported per temperature.", type=str, default="0",
                     to_config=parse_temperatures),
        check=_temperature)
    top_p: float = option(1.0, cli=Cli(("--top-p",), "Nucleus sampling mass (with --temperature > 0)."), check=_top_p)
    seed: int = option(0, cli=Cli(("--seed",), "Sampling seed."), check=_seed,
                       grid=GridKey("seed", f"an integer {SEED.span()}"))
    repeats: int = option(1, cli=Cli(("--repeats",), "Run everything N times (mean ± std of speedups in reports)."),
                          check=_whole(REPEATS, "--repeats"),
                          grid=GridKey("repeats", f"an integer {REPEATS.span()}"))
    warmup: bool = option(True, cli=Cli(("--no-warmup",), "Skip the untimed warm-up generation.", type=bool,
                                        default=False, to_config=lambda v: not v, param="no_warmup"))
    time_steps: bool = option(False, cli=Cli(("--time-steps",), "Time each step's parts (propose, forward, accept, "
                                             "commit, observe) on CUDA too, with a sync after each part; on a "
                                             "CPU they are always timed (docs/metrics.md).", type=bool, default=False))
    draft_model: Optional[str] = option(
        None, cli=Cli(("--draft-model",), "Draft model for sps (same kinds of reference as --model)."))
    engine_bin: Optional[str] = option(
        None, cli=Cli(("--engine-bin",), "llama.cpp's build (a prefix of tools/build-llama-cpp.sh, or its "
                      "llama-server binary) for the engine methods llama.cpp:* (default: $SPECBENCH_LLAMA_CPP, "
                      "the build script's prefix, then PATH); or ENGINE=PATH entries, comma-separated, e.g. "
                      "vllm=VENV/bin/python for the vllm:* servers specbench starts; docs/engines.md. Never taken "
                      "from a run folder: give it again with --resume."),
        check=lambda v: _engine_bin(v), from_folder=False)
    engine_url: list[str] = option(
        factory=list,
        cli=Cli(("--engine-url",), "A server someone else runs for engine methods: URL (every engine method) or "
                "METHOD=URL (one method, e.g. vllm:ngram=http://127.0.0.1:8000); repeatable. Not started or "
                "stopped by specbench; docs/engines.md. Never taken from a run folder: give it again with "
                "--resume.", type=Optional[List[str]], default=None, to_config=lambda v: split_list(v) or []),
        check=lambda v: _engine_urls(v), from_folder=False)
    engine_timeout: float = option(
        300.0, cli=Cli(("--engine-timeout",), "Seconds one engine request (or a server's start) may take before "
                       "its row is an error row."), check=lambda v: _engine_timeout(v))
    output_dir: str = option("results", cli=Cli(("--output-dir",), "Where run folders are created.", type=Path,
                                                default=Path("results"), to_config=str))
    auto_candidates: Optional[list[int]] = option(
        None, cli=Cli(("--auto-candidates",), "Budgets 'auto' tries, comma-separated (default "
                      "1,2,3,4,6,8,12,16,24).", type=Optional[str], to_config=_candidates),
        check=_candidates)
    auto_questions: int = option(
        DEFAULT_CALIBRATION_QUESTIONS,
        cli=Cli(("--auto-questions",), "Calibration questions for 'auto' (from the mini suite, one per "
                "category, never reported)."), check=_whole(Bound(1, 10_000), "--auto-questions"))
    auto_tokens: int = option(
        CALIBRATION_TOKENS,
        cli=Cli(("--auto-tokens",), "New tokens per calibration question for 'auto' (capped by --max-new-tokens)."),
        check=_whole(NEW_TOKENS, "--auto-tokens"))
    preset: Optional[str] = option(
        None, cli=Cli(("--preset",), "A published benchmark's settings in one flag (spec-bench); explicit flags "
                      "override it; recorded in the manifest."), check=_preset, grid=None)
    prompt_template: str = option(
        "auto", cli=Cli(("--prompt-template",), "How questions become prompts: auto (the tokenizer's chat template, "
                        "else plain), vicuna (Spec-Bench's), llama-2, llama-3, chatml, none, or a FILE.jinja."),
        check=check_template, grid=GridKey("prompt_template", "a template name or a .jinja path"))
    target: str = option(
        "hf", cli=Cli(("--target",), "What computes the target's forwards: hf (a transformers model, on this "
                      "project's forwards, --forward) or a target an installed package registers (`specbench list "
                      "targets`). A method that needs what the target lacks (hidden states, embeddings) is refused "
                      "before any model loads."), check=_target)
    forward: str = option(
        "auto", cli=Cli(("--forward",), "How the target computes a forward: auto (lean for a Llama-architecture "
                        "target on CPU, else sdpa), sdpa, eager, short (attention for few-token blocks) or lean "
                        "(fused Llama decoder + short); docs/performance.md. One for the whole run, AR included; "
                        "the manifest records the resolved one."), check=check_forward)
    kernels: str = option(
        "auto", cli=Cli(("--kernels",), "Matrix-product kernels of the lean forward: auto (each candidate timed "
                        "once on this CPU per weight shape and block size, cached), or one of mkl, mkl-t, mkl-wx, onednn, "
                        "onednn-t, onednn-packed, mkl-packed everywhere; docs/performance.md. The manifest records "
                        "the plan."), check=check_kernels)

    def validate(self) -> None:
        """Every field's own check (values are normalised in place: '10' -> 10), and options
        only for methods the run has. Needs no registry and no model."""
        for f in dataclasses.fields(self):
            check = f.metadata["check"]
            if check is not None:
                setattr(self, f.name, check(getattr(self, f.name)))
        if isinstance(self.temperature, list):  # auto budgets are calibrated at one temperature
            bcs = [self.block_complexity] + [parse_spec(m)[1] for m in self.methods]
            if any(bc in (AUTO, ADAPTIVE) for bc in bcs):
                raise UsageError("--temperature with several values takes fixed budgets: 'auto' and 'adaptive' "
                                 "are calibrated at one temperature (run each temperature on its own)")
        from specbench_cli.engines.naming import with_baselines

        listed = with_baselines([parse_spec(m)[0] for m in self.methods])  # ENGINE:ar joins its engine's methods
        named = set(self.methods) | set(listed)
        for m in self.method_options:
            if m not in named:
                raise UsageError(f"options given for method '{m}', which is not in --methods")

    @classmethod
    def from_cli(cls, params: dict[str, Any]) -> "RunConfig":
        """The config the `run` command's parameter values (by parameter name) stand for."""
        values = {}
        for f in dataclasses.fields(cls):
            cli = f.metadata["cli"]
            if cli.name in params:
                value = params[cli.name]
                values[f.name] = cli.to_config(value) if cli.to_config else value
        return cls(**values)


def resume_normalisers() -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """`run` parameter -> (RunConfig field, parameter value -> stored value): what `--resume` compares."""
    return {f.metadata["cli"].name: (f.name, f.metadata["cli"].to_config or (lambda v: v))
            for f in dataclasses.fields(RunConfig)}


def field_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def grid_schema() -> dict[str, tuple[Callable[[Any], bool], str, Any]]:
    """Sweep grid key -> (check of the TOML value, what it wants, default), from the fields."""
    schema = {}
    for f in dataclasses.fields(RunConfig):
        g: Optional[GridKey] = f.metadata["grid"]
        if g is None:
            continue
        default = g.default if g.default is not UNSET else field_default(f)
        if g.expands and default is not None and not isinstance(default, list):
            default = [default]
        if f.name == "methods":
            default = None  # a grid must name its methods
        schema[g.key] = (g.check or _grid_check(f, g), g.wants, default)
    return schema


def _grid_check(f: dataclasses.Field, g: GridKey) -> Callable[[Any], bool]:
    """A TOML value fits the field's type (each element, for an expanding key) and passes its check."""
    hint = typing.get_type_hints(RunConfig)[f.name]
    check = f.metadata["check"]

    def one(v: Any) -> bool:
        if not fits(v, strip_optional(hint)) or (isinstance(v, str) and not v.strip()):
            return False
        if check is not None:
            try:
                check(v)
            except UsageError:
                return False
        return True

    if g.expands:
        return lambda v: isinstance(v, list) and bool(v) and all(one(x) for x in v)
    if typing.get_origin(strip_optional(hint)) is list:
        return _str_list
    return one


# ----------------------------------------------------------------------------- the manifest

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
