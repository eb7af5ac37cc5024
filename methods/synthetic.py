"""Synthetic drafts at a set acceptance: the cost of verification apart from any drafter.

The drafter proposes the tokens that the same request's AR answer goes on to produce, and
keeps each draft position with a set probability: `accept` is one probability for every
position (`-o synthetic.accept=0.6`) or one per position (`0.9,0.8,0.6`; positions past the
list take its last value), the *conditional* probability that position k is kept given that
positions 1..k-1 were. The first position not kept gets another token (the reference's + 1,
modulo the vocabulary), so the target refuses the draft there; the positions after it hold the
reference's tokens, so every step drafts as many tokens as a real drafter of that length would
(`num_pred_tokens`, default the block complexity - 1) and the forward costs the same. The
choices are drawn from a stream seeded by option `seed`, the run's `--seed` and the prompt:
the same request drafts the same at every batch size, in a static batch or a running one.

Lossless by construction: the verifier decides every token, so the output is AR's (in greedy
decoding the measured conditional acceptance at position k is `accept[k]` in expectation).

Where the AR answer comes from: a reference table, prompt ids -> AR output ids, that the
harness fills (`refer`): `specbench run` hands over the `ar` row of the same question, turn
and repeat (AR decodes each group first, a resumed run reads AR's stored rows); a load run's
own loop (load/own_loop.py) hands over the AR answers of the trace's prompts, decoding those it
was not given before the point's clock starts. One table is shared by the method and its copies
for the other sequences of a batch. A prompt with no reference drafts nothing (it decodes as AR;
`method_stats.reference` is 0), and so does a sequence once it has left the reference (sampling
at temperature > 0, or batched arithmetic that turned a near tie): the acceptance is then not
the set one, which the rows show.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

MAX_POSITIONS = 64  # probabilities one `accept` list may give


@dataclass
class SyntheticOptions:
    accept: str = opt("0.6")  # keep probability per draft position: one number, or a comma-separated list
    num_pred_tokens: Optional[int] = opt(None, lo=1, hi=MAX_BUDGET)  # None: block complexity - 1
    seed: int = opt(0)


def parse_accept(text: str) -> tuple[float, ...]:
    """'0.6' -> (0.6,); '0.9,0.8,0.6' -> (0.9, 0.8, 0.6); UsageError for anything else."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        probs = tuple(float(p) for p in parts)
    except ValueError:
        raise UsageError(f"option synthetic.accept expects probabilities in [0, 1], comma-separated "
                         f"(got '{text}')") from None
    if not probs or len(probs) > MAX_POSITIONS or not all(0.0 <= p <= 1.0 for p in probs):
        raise UsageError(f"option synthetic.accept expects 1 to {MAX_POSITIONS} probabilities in [0, 1], "
                         f"comma-separated (got '{text}')")
    return probs


class References:
    """Prompt ids -> the AR answer's token ids. A method's copies share one table (`deepcopy`
    returns the table itself), so an answer handed to one is known to all."""

    def __init__(self) -> None:
        self.table: dict[tuple[int, ...], list[int]] = {}

    def __deepcopy__(self, memo: dict) -> "References":
        return self

    def add(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        self.table[tuple(prompt_ids)] = list(output_ids)

    def get(self, prompt_ids: list[int]) -> Optional[list[int]]:
        return self.table.get(tuple(prompt_ids))

    def __len__(self) -> int:
        return len(self.table)


class Synthetic(Method):
    name = "synthetic"
    summary = ("synthetic drafts: the AR answer's next tokens, each position kept with a set probability "
               "(verification cost at a known acceptance)")
    structure = Structure.CHAIN
    # no adaptive budget: its point is a set acceptance at a set draft length
    reference_drafts = True  # drafts from a reference the harness supplies (`refer`); none: it drafts nothing
    Options = SyntheticOptions

    def plan(self) -> None:
        self.accept = parse_accept(self.opts.accept)
        cap = self.ctx.budget - 1
        self.k = cap if self.opts.num_pred_tokens is None else min(self.opts.num_pred_tokens, cap)
        self.references = References()

    def setup(self) -> None:
        target, vocab = self.ctx.target, None
        try:
            vocab = int(target.vocab_size) if target is not None else None
        except Exception:  # noqa: BLE001 - a target without a vocabulary size: the tokenizer's
            vocab = None
        if vocab is None and self.ctx.tokenizer is not None:
            vocab = len(self.ctx.tokenizer)
        self.vocab = vocab

    def params(self) -> dict:
        return {"accept": list(self.accept), "num_pred_tokens": self.k, "seed": self.opts.seed}

    # -- the reference ----------------------------------------------------------------------
    def refer(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        """The AR answer (its output ids) to `prompt_ids`: what this method drafts from."""
        self.references.add(prompt_ids, output_ids)

    def knows(self, prompt_ids: list[int]) -> bool:
        return self.references.get(prompt_ids) is not None

    # -- the drafter ------------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.ref = self.references.get(prompt_ids)
        self.rng = random.Random(repr((self.opts.seed, int(self.ctx.seed), list(prompt_ids))))
        self.on = self.ref is not None  # the sequence so far is the reference's
        self.checked = len(prompt_ids)  # ids before this are checked against the reference
        self.counts = {"reference": int(self.ref is not None), "drafted": 0, "kept": 0}

    def _other(self, token: int) -> int:
        return (token + 1) % self.vocab if self.vocab else token + 1

    def propose(self, state: DecodeState) -> Draft:
        if not self.on or self.k <= 0:
            return Draft()
        ref, start = self.ref, state.prompt_len
        assert ref is not None
        ids = state.ids
        for j in range(self.checked, len(ids)):  # the tokens accepted since the last step
            if j - start >= len(ref) or ids[j] != ref[j - start]:
                self.on = False
                return Draft()
        self.checked = len(ids)
        done = len(ids) - start  # reference tokens already in the sequence
        # at most one token fewer than the cap leaves: a step's tokens are then all kept, so no
        # accepted position is cut from the count at the cap (the measured acceptance stays the set one)
        n = min(self.k, state.remaining - 1, len(ref) - done)
        tokens, keep = [], True
        for j in range(n):
            tok = ref[done + j]
            if keep and self.rng.random() >= self.accept[min(j, len(self.accept) - 1)]:
                keep, tok = False, self._other(tok)
            self.counts["kept"] += keep
            tokens.append(tok)
        self.counts["drafted"] += n
        return Draft.chain(tokens)

    def stats(self) -> Optional[dict]:
        return dict(self.counts)
