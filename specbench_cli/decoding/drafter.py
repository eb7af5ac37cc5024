"""The drafter contract: what the decoding loop calls, and what it hands over. Defined once.

Every method is a `Drafter`. Per generation the loop calls `reset(prompt_ids)`, then per
step `propose(state) -> Draft` before the target forward and `observe(result)` after the
verdict. A drafter declares, as class attributes, what it is and what it needs:

- `structure`: `CHAIN` when every draft is one chain (per-position acceptance, k-alpha, is
  meaningful), `TREE` when drafts branch, `NONE` when it never drafts (AR).
- `needs_hidden_states`: the loop then also hands it the target's last hidden state (after
  the final norm) at every position that became part of the sequence, from the same forward
  that produced the logits: no second forward and no per-layer states. Drafters that leave
  it False pay nothing.

Two optional hooks exist for *lossy* methods that change the output on purpose (fastcot):
`finished()` ends decoding before EOS or the length cap (an iteration budget), and
`epilogue(output_ids)` returns tokens the loop appends to the decoded text before it decodes a
short continuation (an answer trigger and the answer). Lossless drafters never override them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.lazy import torch


class Structure(str, enum.Enum):
    """Shape of a drafter's proposals (a str, so it serialises as "chain" / "tree" / "none")."""

    NONE = "none"
    CHAIN = "chain"
    TREE = "tree"


@dataclass
class DecodeState:
    """What a drafter sees when it proposes.

    ids:       prompt + generated tokens so far; `ids[-1]` is the root (last accepted token).
    budget:    block complexity: the forward may process at most `budget` tokens, root
               included, so a draft has at most `budget - 1` nodes.
    remaining: tokens still allowed before the length cap (including the root's successor).
    hidden:    `[k, H]` target last hidden states (after the final norm) of the k positions
               that joined the sequence since the previous `propose` (the whole prompt at
               step 0; the previous root and accepted nodes afterwards): row j is the
               state at position `len(ids) - 1 - k + j`, whose logits predicted the token
               after it. None unless the drafter declares `needs_hidden_states`.
    """

    ids: list[int]
    prompt_len: int
    budget: int
    remaining: int
    step: int = 0
    hidden: Optional[torch.Tensor] = None


@dataclass
class VerifyResult:
    """What a drafter observes after each verify forward.

    logits:   `[n+1, V]` target logits at root (row 0) and every node (row i+1).
    accepted: node indices of the accepted path, root excluded.
    hidden:   `[1 + len(accepted), H]` target last hidden states (after the final norm) of the
              root and the accepted nodes, in path order; None unless the drafter declares
              `needs_hidden_states`. Its last row is the state whose logits gave the bonus token.
    preds:    greedy argmax per row, when decoding greedily.
    top:      `[n+1][k]` the target's k = `host_topk` best token ids per row, best first (as
              `torch.topk` ranks them), on the host; None unless the drafter declares `host_topk`.
    values:   the flat float list of what the drafter's `host_values` computed on this step's
              logits, brought to the host in the loop's one transfer; None when it computed nothing.
    state:    the DecodeState `propose` was given; its `ids` is the engine's sequence, which by
              now ends with `new_tokens` (the root is `state.ids[-1 - len(new_tokens)]`).
    """

    draft: Draft
    accepted: list[int]
    new_tokens: list[int]
    logits: torch.Tensor
    hidden: Optional[torch.Tensor]
    preds: Optional[list[int]]
    state: DecodeState
    top: Optional[list[list[int]]] = None
    values: Optional[list[float]] = None


class Drafter:
    """Base drafter: proposes nothing (so it decodes exactly like AR)."""

    name: ClassVar[str] = ""
    structure: ClassVar[Structure] = Structure.NONE
    needs_hidden_states: ClassVar[bool] = False
    # With `needs_hidden_states`: None = the last hidden state (after the final norm); a tuple of
    # layer indices = the hidden states at the *inputs* of those layers, concatenated in that
    # order ([k, len(layers) * H]), from the same forward (EAGLE-3's features). Set in `setup`.
    hidden_layers: Optional[tuple[int, ...]] = None
    # True when only part of a draft may be verified (an adaptive budget, decoding/budget.py): the
    # drafts are plain (no input-only nodes, no embeddings) and `observe` reads the verified
    # draft from `result.draft`, never a copy of what `propose` returned.
    adaptive_budget: ClassVar[bool] = False
    # How many of the target's best tokens per verified row `observe` reads (`VerifyResult.top`;
    # 0: none). The loop brings them to the host together with the verdict's argmax, in the one
    # transfer per step, so a drafter that learns from the logits (Token Recycling, TR-Jacobi)
    # never makes the host wait for the device itself. An int (a method may set it in `plan`).
    host_topk: int = 0

    def reset(self, prompt_ids: list[int]) -> None:
        """Start a new generation for this prompt."""

    def propose(self, state: DecodeState) -> Draft:
        """The draft for this step: at most `state.budget - 1` nodes."""
        return Draft()

    def host_values(self, logits: torch.Tensor) -> Optional[torch.Tensor]:
        """Work on this step's logits (`[n+1, V]`, the rows of the draft `propose` just returned;
        on the device, or a float32 host view on a CPU) whose result `observe` reads: any tensor,
        which the loop brings to the host in the step's one transfer as `VerifyResult.values`
        (flattened, as float64: token ids and probabilities alike are exact). Called after the
        forward and before the verdict, so it cannot depend on what is accepted. None (the
        default): nothing."""
        return None

    def observe(self, result: VerifyResult) -> None:
        """See what the target accepted and its logits at every node."""

    def finished(self) -> bool:
        """True to stop decoding now (checked before every step). Lossy methods only."""
        return False

    def epilogue(self, output_ids: list[int]) -> Optional["Epilogue"]:
        """After decoding: tokens to append to `output_ids` (EOS already removed) and a
        continuation budget, or None (the default: the output is what was decoded)."""
        return None

    def stats(self) -> Optional[dict]:
        """Method-specific counters of the last generation, stored in its row (`method_stats`)."""
        return None


@dataclass
class Epilogue:
    """What the loop does after decoding: feed `tokens` (not generated: e.g. approximate tokens
    and an answer trigger) in one forward, then decode up to `max_new_tokens` more."""

    tokens: list[int]
    max_new_tokens: int
