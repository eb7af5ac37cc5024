"""The target: what computes the forwards a decoding loop verifies drafts with. Defined once.

The loop (decoding/decoder.py), the cost curve (run/auto/cost.py) and every method reach the model
only through this protocol, so a target can be transformers' module (`HFTarget`,
targets/hf/target.py), a quantised runtime or an inference engine without any of them changing.

A target holds the key/value state of a *batch*: `start` prefills B prompts (each on its own,
so batch size 1 and batch size N see the same prefill arithmetic) and returns an opaque
`Batch` handle; per step

    verify(batch, roots, drafts, want) -> Forward    one forward over every live row's root + draft
    commit(batch, past, keep)                          keep each row's root + accepted path, drop the rest

and `leave(batch, row)` removes a finished row (the last live row takes its index, as callers
expect). `join(batch, prompts, ...)` prefills more prompts into a running batch as its last rows
(continuous batching: sequences join between steps; decoding/continuous.py). `detach(batch, row)` hands a row over as a batch of one (a lossy method's epilogue).

What a drafter may need beyond logits is a declared capability (`CAPABILITIES`); a target lists
the ones it has in `capabilities`, and a method that needs one a target lacks is refused before
any model loads (run/plan.py), with one line and exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence

from specbench_cli.decoding.draft import Draft

# name -> what it gives a drafter
CAPABILITIES: dict[str, str] = {
    "hidden_states": "the last hidden state (after the final norm) at every verified node",
    "layer_features": "the inputs of chosen decoder layers at every verified node (EAGLE-3's features)",
    "input_embeddings": "draft nodes fed as ready input-embedding vectors instead of token ids",
    "token_embeddings": "the input-embedding module (token id -> vector)",
    "output_projection": "the output projection (LM head: hidden state -> logits)",
    "config": "the model's configuration (hidden size, layers, vocabulary)",
}


class TargetError(RuntimeError):
    """A target cannot do what was asked (a batch it does not hold, a capability it lacks)."""


class MissingCapability(TargetError, AttributeError):
    """A capability the target does not declare: like a missing attribute (so `getattr(target,
    "config", None)` is None on a target without a config)."""


@dataclass
class Forward:
    """One verify (or prefill) forward's outputs.

    logits:   `[sum_b (1 + n_b), V]` logits of every real row (root, then nodes), sequence by
              sequence; for a prefill `[1, V]`, the prompt's last position only.
    features: per row of the batch, `[1 + n_b, H']` hidden states or layer features of its real
              rows (prefill: `[T, H']`, every prompt position); None unless asked for.
    started:  `time.perf_counter()` just before the model ran (after the inputs were built), so
              the loop can tell input building from the forward itself.
    """

    logits: Any
    features: Optional[list[Any]]
    started: float


class Batch:
    """A target's key/value state of B sequences; opaque to everything but its target."""

    rows: int = 0
    length: int = 0  # the write slot of the next forward (`past` of `commit`)


class Target:
    """The protocol (module doc). Subclasses implement every method; `HFTarget` is the reference.

    `want` (of `start` and `verify`): False for logits only, True for the last hidden states
    (capability `hidden_states`), or a tuple of layer indices for the inputs of those layers
    concatenated (capability `layer_features`).
    """

    name: ClassVar[str] = ""
    capabilities: ClassVar[frozenset[str]] = frozenset()
    # What `load` is handed as `resolved` (models/load.py): "file", the file or folder the model
    # reference names (an alias: its .gguf file); "transformers", a Hugging Face folder or hub id
    # (a .gguf converted once, a folder's own code refused without --trust-remote-code), from
    # which the model loader also loads the tokenizer first.
    weights: ClassVar[str] = "file"
    device: Any = None
    dtype: Any = None
    # what the manifest's `model` record says of how the target computes (models/load.py), set
    # by `load` where the target has it
    params: int = 0                     # the model's parameters as loaded (0: not counted)
    forward_name: Optional[str] = None  # the forward it computes with, where it has a choice (hf: `--forward`)
    kernels: Optional[dict] = None      # that forward's kernel plan, summarised (hf's lean forward)

    @classmethod
    def load(cls, ref: str, *, device: str = "cpu", dtype: str = "float32", **options: Any) -> "Target":
        """The target for model reference `ref` (`--model`), on `device` in `dtype`: how `specbench
        run --target NAME` and `specbench cost --target NAME` make it, through the model loader
        (models/load.py `load_model`). Options the loader passes every target (a target reads
        those it uses): `resolved` (see `weights`), `forward` and `kernels` (`--forward`,
        `--kernels`), `kernel_plan` (the lean forward's cached kernel plan, targets/hf/load.py),
        `trust_remote_code`, and for "transformers" weights `local_files_only` (the hub is
        unreachable: its local cache only)."""
        raise NotImplementedError(f"target '{cls.name}' cannot be loaded by name")

    # -- the batch life cycle -----------------------------------------------------------------
    def start(self, prompts: Sequence[list[int]], room: int, want: bool | tuple[int, ...] = False
              ) -> tuple[Batch, list[Forward]]:
        """Prefill each prompt on its own; `room`: tokens any row may add after its prompt
        (new tokens + one block). Returns the batch and one prefill Forward per prompt."""
        raise NotImplementedError

    def verify(self, batch: Batch, roots: Sequence[int], drafts: Sequence[Draft],
               want: bool | tuple[int, ...] = False) -> Forward:
        """One forward over each live row's root + draft (`roots[r]`, `drafts[r]` for row r)."""
        raise NotImplementedError

    def join(self, batch: Optional[Batch], prompts: Sequence[list[int]], room: int,
             want: bool | tuple[int, ...] = False) -> tuple[Batch, list[Forward]]:
        """Continuous batching: prefill each prompt on its own (as `start` does) and add it to a
        running `batch` as its last rows, between two steps; `batch` None: a new batch of those
        rows, which later prompts may join (a batch `start` made may refuse joins). `room`: tokens
        a new row may add after its prompt. Returns the batch (the same handle when one was given)
        and one prefill Forward per prompt. A target that cannot (`can_join` False) raises."""
        raise TargetError(f"target '{self.name}' cannot add a sequence to a running batch (continuous batching)")

    @classmethod
    def can_join(cls) -> bool:
        """Whether the target implements `join` (continuous batching)."""
        return cls.join is not Target.join

    def commit(self, batch: Batch, past: int, keep: Sequence[list[int]]) -> None:
        """After a forward that wrote at slot `past`: per row keep the rows `keep[r]` (ascending
        offsets into its `[root] + draft` block, 0 = the root) and drop the rest."""
        raise NotImplementedError

    def leave(self, batch: Batch, row: int) -> None:
        """Remove a finished row; the last live row takes index `row`."""
        raise NotImplementedError

    def detach(self, batch: Batch, row: int) -> Batch:
        """Row `row` as a batch of one (positions from 0), e.g. for a lossy method's epilogue."""
        raise NotImplementedError

    def crop(self, batch: Batch, length: int) -> None:
        """Keep a batch of one's first `length` tokens."""
        raise NotImplementedError

    # -- capabilities -----------------------------------------------------------------------
    def token_embeddings(self) -> Any:
        raise self.lacks("token_embeddings")

    def output_projection(self) -> Any:
        raise self.lacks("output_projection")

    @property
    def config(self) -> Any:
        raise self.lacks("config")

    @property
    def generation_config(self) -> Any:
        """The model's generation settings (its end-of-turn ids), or None when it has none."""
        return None

    @property
    def vocab_size(self) -> int:
        """Width of the logits rows."""
        raise NotImplementedError

    def describe(self) -> dict:
        """What the manifest and `specbench cost --json` record about how this target computes."""
        return {"target": self.name}

    def lacks(self, capability: str) -> MissingCapability:
        return MissingCapability(f"target '{self.name}' does not provide {capability} "
                           f"({CAPABILITIES.get(capability, capability)})")


def missing_capabilities(needed: Sequence[str], target_capabilities: frozenset[str] | set[str]) -> list[str]:
    """The capabilities of `needed` a target does not declare, in the order given."""
    return [c for c in needed if c not in target_capabilities]


def check_capabilities(method: str, needed: Sequence[str], target: str,
                       target_capabilities: frozenset[str] | set[str]) -> Optional[str]:
    """One line saying why `method` cannot run on `target`, or None when it can."""
    missing = missing_capabilities(needed, target_capabilities)
    if not missing:
        return None
    what = "; ".join(f"{c} ({CAPABILITIES.get(c, '?')})" for c in missing)
    return f"method {method} needs what target '{target}' does not provide: {what}"
