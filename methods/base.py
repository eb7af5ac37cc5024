"""A method: a drafter (engine/drafter.py) with a name, options, and a plan/bind life cycle;
and the option parsing shared by all of them."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from specbench_cli.engine.drafter import Drafter
from specbench_cli.engine.verify import SamplingConfig
from specbench_cli.errors import UsageError, did_you_mean


@dataclass
class MethodContext:
    """The run a method is planned against, and the target once it is bound.

    `plan` may read everything except `model` and `tokenizer` (None until `bind`).
    """

    model: Any = None
    tokenizer: Any = None
    budget: int = 10
    device: str = "cpu"
    dtype: str = "float32"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    draft_model: Optional[str] = None
    trust_remote_code: bool = False  # from --trust-remote-code: may a draft model run its own code
    target: Optional[str] = None  # the run's --model reference (heads check what they were trained for)


@dataclass
class NoOptions:
    pass


def opt(default: Any, *, lo: Optional[float] = None, hi: Optional[float] = None,
        choices: Optional[tuple] = None) -> Any:
    """A method option with declared bounds (inclusive) or choices, checked in `parse_options`
    before any model loads. `hi` is an absolute ceiling that keeps memory and time bounded;
    budget-dependent limits are the method's `plan`."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "choices": choices})


INT64 = (-(1 << 63), (1 << 63) - 1)


def option_bounds(f: dataclasses.Field) -> tuple[Optional[float], Optional[float], Optional[tuple]]:
    """(lo, hi, choices) declared for an option field (None where not declared)."""
    return f.metadata.get("lo"), f.metadata.get("hi"), f.metadata.get("choices")


class Method(Drafter):
    """A drafter with a name, options and a two-step life. AR is this class unchanged.

    1. `Method(ctx, **options)` plans: parses the options into `Options` (a dataclass of
       tunables with defaults) and calls `plan()`, which resolves budget-dependent defaults
       and raises UsageError on impossible settings. Cheap and model-free: the CLI plans every
       method before it loads a model, so bad options exit 2 at once.
    2. `bind(model, tokenizer)` attaches the target and calls `setup()`, the heavy part
       (a draft model, embedding statistics, tokenizer-derived ids).

    `create(ctx, **options)` does both (tests, scripts). Subclasses set `name`, `summary`,
    `structure` (engine.drafter.Structure), `Options`, and override `plan` / `setup` and the
    drafter contract (`reset`, `propose`, `observe`) they need.
    """

    summary: ClassVar[str] = ""
    lossless: ClassVar[bool] = True
    needs_training: ClassVar[bool] = False
    Options: ClassVar[type] = NoOptions

    def __init__(self, ctx: MethodContext, **options: Any) -> None:
        self.ctx = ctx
        self.opts = parse_options(self.name, self.Options, options)
        self.plan()

    @classmethod
    def create(cls, ctx: MethodContext, **options: Any) -> "Method":
        """Plan and bind in one go, with the target in `ctx`."""
        return cls(ctx, **options).bind(ctx.model, ctx.tokenizer)

    # -- life cycle -------------------------------------------------------------------------
    def plan(self) -> None:
        """Resolve budget-dependent defaults; raise UsageError on impossible settings. No model."""

    def bind(self, model: Any, tokenizer: Any) -> "Method":
        """Attach the target model and tokenizer, then run `setup`; returns self."""
        self.ctx = dataclasses.replace(self.ctx, model=model, tokenizer=tokenizer)
        self.setup()
        return self

    def setup(self) -> None:
        """Heavy, model-dependent set-up (runs once per run, in `bind`)."""

    # -- what a method learns from its own earlier answers in a run (suffix's global tree) -----
    def forget(self) -> None:
        """Drop everything earlier generations left behind. The runner calls it when a pass over
        the questions starts (the first, after the warm-up, and each `--repeats` pass), so neither
        the warm-up nor an earlier pass (which answered the same questions) is remembered."""

    def remember(self, output_ids: list[int]) -> None:
        """The answer of a finished turn of this method in the current pass, in run order: each
        row the runner writes, and on `--resume` each row the run folder already holds at the
        point the run reaches it, so a resumed run remembers what an uninterrupted one did."""

    # -- description ------------------------------------------------------------------------
    @property
    def extra_params(self) -> int:
        """Parameters this method adds beyond the target (draft model, heads)."""
        return 0

    def params(self) -> dict:
        return dataclasses.asdict(self.opts)

    def label(self) -> str:
        """Display name: the method name plus the options the user changed from their defaults
        (budget-derived values are in `params()`, and the BC is a column of its own)."""
        given = self.shown_options()
        if not given:
            return self.name
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in given.items()) + ")"

    def shown_options(self) -> dict:
        """The options the label shows: those the user changed."""
        return user_options(self.opts)


def user_options(opts) -> dict:
    """Options whose value differs from the dataclass default (what the user set)."""
    default = type(opts)()
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
            if getattr(opts, f.name) != getattr(default, f.name)}


def _type_name(typ: Any) -> str:
    """'int' for int, Optional[int], int | None, or their string forms (modules with or
    without `from __future__ import annotations` annotate differently)."""
    if not isinstance(typ, str):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        typ = args[0] if len(args) == 1 else typ
        return getattr(typ, "__name__", str(typ))
    return typ.replace("Optional[", "").replace("]", "").replace(" | None", "").replace("None | ", "")


def _coerce(value: Any, typ: Any, method: str, key: str) -> Any:
    if not isinstance(value, str):
        return value
    t = _type_name(typ)
    try:
        if t == "int":
            return int(value)
        if t == "float":
            return float(value)
        if t == "bool":
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
    except ValueError:
        raise UsageError(f"option {method}.{key} expects {t}, got '{value}'") from None
    return value


def parse_options(method: str, options_cls: type, given: dict[str, Any]):
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    kwargs = {}
    for key, value in given.items():
        k = key.replace("-", "_")
        if k not in fields:
            known = ", ".join(fields) or "none"
            raise UsageError(f"method '{method}' has no option '{key}'.{did_you_mean(k, fields)} Options: {known}")
        kwargs[k] = check_option(method, fields[k], _coerce(value, fields[k].type, method, key))
    return options_cls(**kwargs)


def check_option(method: str, f: dataclasses.Field, value: Any) -> Any:
    """`value` against the field's type and declared bounds; UsageError naming the option."""
    if value is None and f.default is None:
        return value
    where, t = f"option {method}.{f.name}", _type_name(f.type)
    if t == "bool":
        if not isinstance(value, bool):
            raise UsageError(f"{where} expects true or false, got '{value}'")
    elif t == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"{where} expects a whole number, got '{value}'")
        if not INT64[0] <= value <= INT64[1]:  # what torch and numpy take (seeds have no other bound)
            raise UsageError(f"{where} must be a 64-bit integer, between {INT64[0]} and {INT64[1]} (got {value})")
    elif t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(f"{where} expects a finite number, got '{value}'")
        value = float(value)
    elif t == "str" and not isinstance(value, str):
        raise UsageError(f"{where} expects text, got '{value}'")
    elif t == "str" and not value.strip():
        raise UsageError(f"{where} needs a value (got an empty one)")
    lo, hi, choices = option_bounds(f)
    if choices is not None and value not in choices:
        raise UsageError(f"{where} must be one of {', '.join(map(str, choices))} (got '{value}')")
    if lo is not None and value < lo or hi is not None and value > hi:
        span = f"between {lo} and {hi}" if lo is not None and hi is not None else (
            f"at least {lo}" if lo is not None else f"at most {hi}")
        raise UsageError(f"{where} must be {span} (got {value})")
    return value


class Delegate:
    """Another registered method run inside `owner` (a fallback drafter, a drafter a method
    wraps): planned with the owner's context when the owner plans (so its options are checked
    before any model loads), bound to the same target when the owner binds. The owner forwards
    `reset` / `propose` / `observe` to `self.method` as its own rule says."""

    def __init__(self, owner: Method, name: str, options: Optional[dict[str, Any]] = None) -> None:
        from specbench_cli import methods as registry

        if name == owner.name:
            raise UsageError(f"{owner.name} cannot delegate to itself")
        self.owner = owner
        self.method: Method = registry.get(name)(owner.ctx, **(options or {}))

    def bind(self) -> Method:
        """Bind to the owner's target (call from the owner's `setup`)."""
        return self.method.bind(self.owner.ctx.model, self.owner.ctx.tokenizer)
