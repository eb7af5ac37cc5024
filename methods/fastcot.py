"""FastCoT (Zhang et al., 2023, arXiv:2311.08263) and its plain-CoT baseline. **Lossy.**

FastCoT decodes the chain of thought with Jacobi iterations over a context window of `c`
tokens after the exact ones, stops early (an iteration cap, or EOS), and then asks for the
answer with the exact rationale *plus the window's approximate tokens* ("a glimpse of the
future") followed by an answer trigger ("So the answer is"). `cot` is the same pipeline
without the window and without a cap: AR to EOS, then the same trigger, so the two are
compared on the same basis (the paper's "Vanilla CoT").

Engine fit: the Jacobi phase is an ordinary chain drafter (the verifier keeps the exact
tokens, so the exact prefix equals AR's). The two lossy parts use the engine's optional hooks
(decoding/drafter.py): `finished()` ends decoding at the iteration cap, `epilogue()` hands the
loop the approximate tokens + trigger to feed before it decodes the answer. Choices the paper
leaves open are in docs/methods/fastcot.md.

Approximate Tokens Buffer: `buf[j]` is the current guess for generated position `j` (0 = the
first generated token). It starts as the question's tokens repeated (the paper's
initialisation), each forward overwrites positions `E .. E+c` with the target's argmax
(E = exact tokens so far), and `hi` is one past the furthest position the target predicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Epilogue, Structure, VerifyResult
from specbench_cli.methods.core.method import Method
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

TRIGGER = "\nSo the answer is"
INITS = ("question", "pad")


@dataclass
class FastCoTOptions:
    window: Optional[int] = opt(None, lo=0, hi=MAX_BUDGET)  # context window c; None: block complexity - 1
    max_iters: int = opt(0, lo=0, hi=1_000_000)  # iteration cap (forwards of the reasoning phase, prefill included); 0: none
    trigger: str = TRIGGER        # answer trigger appended after exact + approximate tokens
    answer_tokens: int = opt(16, lo=1, hi=512)  # tokens decoded after the trigger
    approx: bool = True           # False: FastCoT "w/o by-products" (exact tokens only)
    init: str = opt("question", choices=INITS)  # question | pad: what fills the buffer before any forward


@dataclass
class CoTOptions:
    trigger: str = TRIGGER
    answer_tokens: int = opt(16, lo=1, hi=512)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class FastCoT(Method):
    name = "fastcot"
    summary = "FastCoT (lossy): Jacobi window over the rationale, iteration cap, then answer trigger"
    lossless = False
    Options = FastCoTOptions
    structure = Structure.CHAIN

    # -- life cycle -----------------------------------------------------------------------------
    def plan(self) -> None:
        o = self.opts
        cap = self.ctx.budget - 1
        self.k = cap if o.window is None else min(o.window, cap)
        self.max_iters, self.use_approx, self.init = o.max_iters, o.approx, o.init

    def setup(self) -> None:
        from specbench_cli.models.prompting import encode_chat, stop_token_ids, user_turn

        tok = self.ctx.tokenizer
        self.eos = set(stop_token_ids(tok, self.ctx.target))
        self.trigger_ids = list(tok.encode(self.opts.trigger, add_special_tokens=False))
        # The chat template around an empty message: stripped from the prompt to find the question.
        self.template = encode_chat(tok, user_turn(""))
        self.pad = tok.pad_token_id if isinstance(tok.pad_token_id, int) else 0
        self.parents = list(range(-1, self.k - 1))

    def params(self) -> dict:
        return {"structure": self.structure.value, "window": self.k, "max_iters": self.max_iters,
                "approx": self.use_approx, "answer_tokens": self.opts.answer_tokens, "trigger": self.opts.trigger}

    # -- the drafter ----------------------------------------------------------------------------
    def question_tokens(self, prompt_ids: list[int]) -> list[int]:
        """The prompt without the chat template's fixed head and tail (what the template puts
        around an empty user message); the whole prompt if nothing is left."""
        head = _common_prefix(prompt_ids, self.template)
        tail = _common_prefix(prompt_ids[::-1], self.template[::-1])
        tail = min(tail, len(prompt_ids) - head)
        return prompt_ids[head:len(prompt_ids) - tail] or list(prompt_ids)

    def reset(self, prompt_ids: list[int]) -> None:
        self.seed_ids = self.question_tokens(prompt_ids) if self.init == "question" else [self.pad]
        self.buf: list[int] = []
        self.hi = 1              # the prefill predicted position 0
        self.steps = self.hits = 0
        self.exact = 1
        self.ended = False
        self.approx_ids: list[int] = []

    def _grow(self, n: int) -> None:
        while len(self.buf) < n:
            self.buf.append(self.seed_ids[len(self.buf) % len(self.seed_ids)])

    def propose(self, state: DecodeState) -> Draft:
        if self.k == 0:
            return Draft()
        start = len(state.ids) - state.prompt_len      # E: exact tokens so far (root included)
        self._grow(start + self.k)
        return Draft(tokens=self.buf[start:start + self.k], parents=self.parents)

    def observe(self, result: VerifyResult) -> None:
        state = result.state
        start = len(state.ids) - state.prompt_len - len(result.new_tokens)  # E before this step
        self.steps += 1
        self.hits += len(result.accepted)
        self.exact = start + len(result.new_tokens)
        self.ended = any(t in self.eos for t in result.new_tokens)
        if self.k == 0:
            return
        preds = result.preds if result.preds is not None else result.logits.argmax(dim=-1).tolist()
        self._grow(start + self.k + 1)
        self.buf[start:start + self.k + 1] = preds[: self.k + 1]     # the next Jacobi iterate
        self.buf[start:start + len(result.new_tokens)] = result.new_tokens  # exact (sampling may differ)
        self.hi = max(self.hi, start + self.k + 1)

    def finished(self) -> bool:
        return self.max_iters > 0 and 1 + self.steps >= self.max_iters

    def epilogue(self, output_ids: list[int]) -> Optional[Epilogue]:
        """Approximate tokens (only when the rationale stopped early, was not cut by the length
        cap, and only up to the first EOS among them) + the trigger; then the answer."""
        approx: list[int] = []
        if self.use_approx and self.k and not self.ended and len(output_ids) == self.exact:
            for t in self.buf[self.exact:self.hi]:
                if t in self.eos:
                    break
                approx.append(t)
        self.approx_ids = approx
        return Epilogue(approx + self.trigger_ids, self.opts.answer_tokens)

    def stats(self) -> dict:
        return {"iterations": 1 + self.steps, "jacobi_hits": self.hits, "exact_tokens": self.exact,
                "approx_tokens": len(self.approx_ids), "trigger_tokens": len(self.trigger_ids),
                "stopped": "eos" if self.ended else ("cap" if self.finished() else "length")}


class CoT(Method):
    """Plain chain of thought: AR to EOS (or --max-new-tokens), then the same answer trigger as
    fastcot. Lossy only in that it appends the trigger and an answer to AR's exact text."""

    name = "cot"
    summary = "CoT baseline for fastcot (lossy): AR to EOS, then the answer trigger and the answer"
    lossless = False
    Options = CoTOptions
    structure = Structure.NONE

    def plan(self) -> None:
        self.k, self.max_iters, self.use_approx, self.init = 0, 0, False, "pad"

    def params(self) -> dict:
        return {"answer_tokens": self.opts.answer_tokens, "trigger": self.opts.trigger}

    # The same pipeline with a window of 0 and no cap (kept out of the class bases so
    # `specbench list methods` can read this class's attributes without importing it).
    setup = FastCoT.setup
    question_tokens = FastCoT.question_tokens
    reset = FastCoT.reset
    _grow = FastCoT._grow
    propose = FastCoT.propose
    observe = FastCoT.observe
    finished = FastCoT.finished
    epilogue = FastCoT.epilogue
    stats = FastCoT.stats
