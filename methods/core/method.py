"""A method: a drafter (decoding/drafter.py) with a name, typed options (specbench_cli/options.py)
and a plan/bind life cycle; and `Delegate`, a registered method run inside another."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from specbench_cli.decoding.drafter import Drafter
from specbench_cli.decoding.verify import SamplingConfig
from specbench_cli.errors import UsageError
from specbench_cli.options import NoOptions, parse_options, user_options


@dataclass
class MethodContext:
    """The run a method is planned against, and the target once it is bound.

    `plan` may read everything except `target` and `tokenizer` (None until `bind`). `target` is
    the engine's `Target` (decoding/target.py), the only way a method reaches the model: its
    declared capabilities (`needs` of the method) and nothing else. A transformers model given
    here is wrapped in an `HFTarget`.

    The budget: `budget`, the block complexity (fixed, or the one `auto` chose), and `adaptive`,
    under `--block-complexity adaptive` the calibrated adaptive budget (decoding/budget.py) that
    trims each draft within it (None otherwise). The runner hands both to the loop
    (`Decoder.generate`); a copy of the method for another sequence of a batch has its own.
    """

    target: Any = None
    tokenizer: Any = None
    budget: int = 10
    adaptive: Any = None  # decoding/budget.py `AdaptiveBudget`, or None
    device: str = "cpu"
    dtype: str = "float32"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    draft_model: Optional[str] = None
    trust_remote_code: bool = False  # from --trust-remote-code: may a draft model run its own code
    target_ref: Optional[str] = None  # the run's --model reference (heads check what they were trained for)

    def __post_init__(self) -> None:
        if self.target is not None:
            from specbench_cli.targets import as_target

            self.target = as_target(self.target)


class Method(Drafter):
    """A drafter with a name, options and a two-step life. AR is this class unchanged.

    1. `Method(ctx, **options)` plans: parses the options into `Options` (a dataclass of
       tunables with defaults) and calls `plan()`, which resolves budget-dependent defaults
       and raises UsageError on impossible settings. Cheap and model-free: the CLI plans every
       method before it loads a model, so bad options exit 2 at once.
    2. `bind(target, tokenizer)` attaches the target and calls `setup()`, the heavy part
       (a draft model, embedding statistics, tokenizer-derived ids).

    `create(ctx, **options)` does both (tests, scripts). Subclasses set `name`, `summary`,
    `structure` (decoding.drafter.Structure), `Options`, and override `plan` / `setup` and the
    drafter contract (`reset`, `propose`, `observe`) they need.

    `drafts_by_chance`: its drafts are guesses never conditioned on the text the target accepted
    (vanilla Jacobi), so no acceptance is promised (tests do not expect one); a method that drafts
    nothing has `structure = Structure.NONE` (AR).

    `reference_drafts`: its drafts come from a reference answer the harness hands it (`refer`:
    prompt ids -> AR's output ids; synthetic), so where none was handed over it drafts nothing,
    no acceptance is promised (tests do not expect one), and it is left out of the default
    methods of a run (it measures the loop, not a drafter).

    `needs` names the target capabilities the method uses (decoding/target.py `CAPABILITIES`:
    hidden states, layer features, token embeddings, the output projection, the config, input
    embeddings); a target that lacks one is refused before any model loads.

    `requires` names the artifacts a method cannot run without, so tools and tests can supply
    them without knowing the method: "heads" (option `heads`: a heads folder of the method's
    `kind`), "datastore" (option `datastore`: a REST datastore), "draft_model" (a draft model:
    `--draft-model` or option `draft_model`).
    """

    summary: ClassVar[str] = ""
    lossless: ClassVar[bool] = True
    needs_training: ClassVar[bool] = False
    requires: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[tuple[str, ...]] = ()
    drafts_by_chance: ClassVar[bool] = False
    reference_drafts: ClassVar[bool] = False
    Options: ClassVar[type] = NoOptions

    def __init__(self, ctx: MethodContext, **options: Any) -> None:
        self.ctx = ctx
        self.opts = parse_options(self.name, self.Options, options)
        self.plan()

    @classmethod
    def create(cls, ctx: MethodContext, **options: Any) -> "Method":
        """Plan and bind in one go, with the target in `ctx`."""
        return cls(ctx, **options).bind(ctx.target, ctx.tokenizer)

    # -- life cycle -------------------------------------------------------------------------
    def plan(self) -> None:
        """Resolve budget-dependent defaults; raise UsageError on impossible settings. No model."""

    def bind(self, target: Any, tokenizer: Any) -> "Method":
        """Attach the target (a `Target`, or a transformers model) and tokenizer, then run
        `setup`; returns self."""
        self.ctx = dataclasses.replace(self.ctx, target=target, tokenizer=tokenizer)
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
        return self.method.bind(self.owner.ctx.target, self.owner.ctx.tokenizer)
