"""A model drafter inside a retrieval method (`samd`, `suffix`): the owner drafts from what it
retrieved when that looks better, and hands the other steps to the fallback.

The fallback is a registered method run through `Delegate` (planned with the owner's context,
so its options are checked before any model loads; bound to the same target). The owner calls,
every step, either `propose` or `skip` (a step the owner drafts itself), and `observe` after
every verification, so the fallback's state never misses a step:
- a head drafter reads the target's hidden states: the owner then asks the engine for them
  (`needs_hidden_states`, and the fallback's `hidden_layers` for EAGLE-3), and `skip` hands them
  to the fallback's `absorb`, which feeds its own KV cache (EAGLE, EAGLE-3, Hydra's prefix
  layer) without drafting; Medusa reads only the newest state and needs nothing;
- Token Recycling refreshes its matrix in `observe`; prompt lookup indexes `state.ids` when it
  next drafts.
"""

from __future__ import annotations

from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Delegate, Method
from specbench_cli.methods.heads.kinds import HEAD_METHODS
from specbench_cli.options import user_options

HEAD_FALLBACKS = tuple(sorted(HEAD_METHODS))  # need trained heads: -o OWNER.heads=DIR


class Fallback:
    """Fallback `name` of `owner` (heads folder `heads` for a head drafter)."""

    def __init__(self, owner: Method, name: str, heads: Optional[str]) -> None:
        if name in HEAD_FALLBACKS and not heads:
            raise UsageError(f"{owner.name}.fallback={name} drafts from trained heads: pass -o {owner.name}.heads=DIR")
        if heads and name not in HEAD_FALLBACKS:
            raise UsageError(f"{owner.name}.heads is for a head fallback ({', '.join(HEAD_FALLBACKS)}), not '{name}'")
        self.owner = owner
        self.delegate = Delegate(owner, name, {"heads": heads} if heads else None)
        self.method = self.delegate.method
        # instance attributes: the owner reads the target's hidden states only for a head fallback
        owner.needs_hidden_states = self.method.needs_hidden_states
        owner.host_topk = self.method.host_topk  # the fallback's observe reads the loop's host top-k

    def bind(self) -> None:
        self.delegate.bind()
        self.owner.hidden_layers = getattr(self.method, "hidden_layers", None)

    def reset(self, prompt_ids: list[int]) -> None:
        self.method.reset(prompt_ids)

    def forget(self) -> None:
        """A new pass: the fallback drops what earlier passes left (Token Recycling's matrix)."""
        self.method.forget()

    def propose(self, state: DecodeState) -> Draft:
        return self.method.propose(state)

    def skip(self, state: DecodeState) -> None:
        """The owner drafts this step: a head drafter still takes the step's hidden states."""
        absorb = getattr(self.method, "absorb", None)
        if absorb is not None:
            absorb(state)

    def observe(self, result: VerifyResult) -> None:
        self.method.observe(result)


def shown_options(owner: Method, fallback: Optional[Fallback]) -> dict:
    """The owner's changed options for its label, the fallback shown by its own label (heads by
    their shape, `hydra(H=4,K=1)`) and no heads folder path (it is in the parameters)."""
    given = {k: v for k, v in user_options(owner.opts).items() if k != "heads"}
    if fallback is not None and "fallback" in given:
        given["fallback"] = fallback.method.label()
    return given
