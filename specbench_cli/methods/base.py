"""The drafter contract every method implements, and option parsing shared by all of them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from specbench_cli.engine.loop import DecodeState, VerifyResult
from specbench_cli.engine.tree import Draft
from specbench_cli.engine.verify import SamplingConfig
from specbench_cli.errors import UsageError, did_you_mean


@dataclass
class MethodContext:
    """What a method may use when it is built (once per run, not per question)."""

    model: Any
    tokenizer: Any
    budget: int
    device: str = "cpu"
    dtype: str = "float32"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    draft_model: Optional[str] = None
    trust_remote_code: bool = False  # from --trust-remote-code: may a draft model run its own code


@dataclass
class NoOptions:
    pass


class Method:
    """Base drafter. AR is this class unchanged: it proposes nothing.

    Subclasses set `name`, `summary`, `Options` (a dataclass of tunables with defaults) and
    override `propose` / `observe` / `reset`. `configure()` may derive options from the
    block complexity (`self.ctx.budget`) when the user left them unset (None).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    lossless: ClassVar[bool] = True
    needs_training: ClassVar[bool] = False
    needs_hidden_states: ClassVar[bool] = False
    Options: ClassVar[type] = NoOptions

    def __init__(self, ctx: MethodContext, **options: Any) -> None:
        self.ctx = ctx
        self.opts = parse_options(self.name, self.Options, options)
        self.configure()

    # -- configuration ----------------------------------------------------------------------
    def configure(self) -> None:
        """Resolve budget-dependent defaults; raise UsageError on impossible settings."""

    @property
    def extra_params(self) -> int:
        """Parameters this method adds beyond the target (draft model, heads)."""
        return 0

    def params(self) -> dict:
        return dataclasses.asdict(self.opts)

    def label(self) -> str:
        """Display name: the method name plus the options the user changed from their defaults
        (budget-derived values are in `params()`, and the BC is a column of its own)."""
        given = user_options(self.opts)
        if not given:
            return self.name
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in given.items()) + ")"

    # -- the drafter contract -----------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        """Start a new generation for this prompt."""

    def propose(self, state: DecodeState) -> Draft:
        return Draft()

    def observe(self, result: VerifyResult) -> None:
        """See what the target accepted and its logits at every node."""


def user_options(opts) -> dict:
    """Options whose value differs from the dataclass default (what the user set)."""
    default = type(opts)()
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
            if getattr(opts, f.name) != getattr(default, f.name)}


def _coerce(value: Any, typ: Any, method: str, key: str) -> Any:
    if not isinstance(value, str):
        return value
    t = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    t = t.replace("Optional[", "").replace("]", "").replace(" | None", "")
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
        kwargs[k] = _coerce(value, fields[k].type, method, key)
    return options_cls(**kwargs)
