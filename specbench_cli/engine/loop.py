"""The decoding loop shared by every method.

    1. prefill the prompt, take the first token from its last logits;
    2. step until EOS or the length cap:
       a. the drafter proposes a tree within the budget (`propose`);
       b. one target forward over root + tree (`_forward`);
       c. the verifier picks the accepted path and the bonus token;
       d. the cache keeps only the root and the accepted path;
       e. the drafter sees the result (`observe`); metrics are recorded;
       (a lossy drafter may end this early: `finished()`)
    3. cut the output at EOS and the length cap;
    4. lossy drafters only (`epilogue()`): feed the tokens it returns after the output and
       decode a short continuation (fastcot's answer trigger and answer).

The root of every step is the last accepted token, which is not yet in the KV cache.
The drafter contract (`Drafter`, `DecodeState`, `VerifyResult`) is in `engine/drafter.py`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from specbench_cli.engine.cache import KVCache
from specbench_cli.engine.draft import Draft, tree_inputs
from specbench_cli.engine.drafter import DecodeState, Drafter, VerifyResult
from specbench_cli.engine.verify import SamplingConfig, Verdict, verify_greedy, verify_sampling


class BudgetExceeded(RuntimeError):
    """A drafter proposed more tokens than the block complexity allows (a bug in the drafter)."""


@dataclass
class Generation:
    """Output and per-step record of one generation."""

    output_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    wall_time: float = 0.0
    prefill_time: float = 0.0
    draft_time: float = 0.0
    verify_time: float = 0.0
    overhead_time: float = 0.0
    accept_lengths: list[int] = field(default_factory=list)
    draft_sizes: list[int] = field(default_factory=list)
    draft_path_lengths: list[int] = field(default_factory=list)  # draft positions on the path the target took
    budget_used: list[int] = field(default_factory=list)
    step_draft_ms: list[float] = field(default_factory=list)
    step_verify_ms: list[float] = field(default_factory=list)
    epilogue_tokens: int = 0     # tokens decoded after the drafter's epilogue (lossy methods only)
    stats: Optional[dict] = None  # the drafter's `stats()` after this generation

    @property
    def steps(self) -> int:
        return len(self.accept_lengths)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Decoder:
    """Runs drafters against one target model. Batch size 1."""

    def __init__(self, model: Any, eos_ids: set[int] | list[int], sampling: SamplingConfig | None = None) -> None:
        self.model = model
        self.eos_ids = set(eos_ids)
        self.sampling = sampling or SamplingConfig()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.embed = model.get_input_embeddings()

    # -- one target forward ---------------------------------------------------------------
    def _run(self, kwargs: dict, want_hidden: bool | tuple[int, ...],
             last_only: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One target forward: `[T, V]` logits and, if wanted, `[T, H]` last hidden states.

        `last_only` (the prefill): logits of the last row only, `[1, V]`; hidden states stay `[T, H]`.
        The output head is the largest matrix of a small model (49152 x 576 for SmolLM2-135M):
        applying it to every prompt row cost more than the rest of a 400-token prefill.

        With hidden states it runs the decoder body and then the output head on the body's
        last hidden state (after the final norm), which is what the causal-LM forward does
        itself, so the logits are the same; no per-layer states are kept. (A model whose
        causal-LM forward post-processes logits, e.g. Gemma-2's soft-capping, would need that
        step here too; the Llama-family targets used here have none.)
        """
        if not want_hidden:
            return self.model(**kwargs, **({"logits_to_keep": 1} if last_only else {})).logits[0], None
        if isinstance(want_hidden, tuple):  # the inputs of chosen layers (hidden_states[i] = input of layer i)
            out = self.model.get_decoder()(**kwargs, output_hidden_states=True)
            hidden = out.last_hidden_state
            feats = torch.cat([out.hidden_states[i] for i in want_hidden], dim=-1)
            return self.model.get_output_embeddings()(hidden[:, -1:] if last_only else hidden)[0], feats[0]
        hidden = self.model.get_decoder()(**kwargs).last_hidden_state
        return self.model.get_output_embeddings()(hidden[:, -1:] if last_only else hidden)[0], hidden[0]

    def _forward(self, cache: KVCache, root: int, draft: Draft, want_hidden: bool | tuple[int, ...]):
        past = cache.length
        ids = torch.tensor([[root] + draft.tokens], dtype=torch.long, device=self.device)
        kwargs: dict[str, Any] = {"past_key_values": cache.hf, "use_cache": True}
        if draft.embeds:
            emb = self.embed(ids)
            for node, vec in draft.embeds.items():
                emb[0, node + 1] = vec.to(emb.dtype)
            kwargs["inputs_embeds"] = emb
        else:
            kwargs["input_ids"] = ids
        if len(draft) and not draft.is_chain:
            mask, pos = tree_inputs(draft.parents, past, self.dtype, self.device)
            kwargs["attention_mask"] = mask
            kwargs["position_ids"] = pos
        t_model = time.perf_counter()
        logits, hidden = self._run(kwargs, want_hidden)
        return logits, hidden, past, t_model

    def _choose(self, draft: Draft, logits: torch.Tensor, generator) -> Verdict:
        if self.sampling.greedy:
            return verify_greedy(draft, logits)
        return verify_sampling(draft, logits, self.sampling, generator)

    def _epilogue(self, cache: KVCache, prompt_ids: list[int], out_ids: list[int], epi, generator,
                  g: Generation) -> list[int]:
        """Drop a final EOS, feed `epi.tokens` after the decoded text in one forward, then decode
        up to `epi.max_new_tokens` tokens one at a time. Returns decoded + epi.tokens + answer.

        The cache holds every token but the last of prompt + decoded (the root is never cached),
        possibly more (accepted past the cap): crop it to that, then feed root + tokens."""
        body = out_ids[:-1] if out_ids and out_ids[-1] in self.eos_ids else list(out_ids)
        seq = prompt_ids + body
        cache.crop_to(len(seq) - 1)
        ids = torch.tensor([[seq[-1]] + list(epi.tokens)], dtype=torch.long, device=self.device)
        logits, _ = self._run({"input_ids": ids, "past_key_values": cache.hf, "use_cache": True}, False)
        answer = [self._choose(Draft(), logits[-1:], generator).new_tokens[0]]
        while len(answer) < epi.max_new_tokens and answer[-1] not in self.eos_ids:
            logits, _, past, _ = self._forward(cache, answer[-1], Draft(), False)
            cache.keep(past, [0])
            answer.append(self._choose(Draft(), logits, generator).new_tokens[0])
        g.epilogue_tokens = len(answer)
        return body + list(epi.tokens) + answer

    # -- the loop -------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, drafter: Drafter, prompt_ids: list[int], max_new_tokens: int, budget: int,
                 generator: Optional[torch.Generator] = None) -> Generation:
        """Decode up to `max_new_tokens` after `prompt_ids` with at most `budget` tokens per forward.

        Kept as one function (~65 lines) on purpose: the clock reads t0..t4 that split each
        step into drafting, verifying and overhead must be read top to bottom in one place.
        """
        if budget < 1:
            raise ValueError("block complexity must be at least 1")
        g = Generation(prompt_tokens=len(prompt_ids))
        want_hidden = drafter.needs_hidden_states
        if want_hidden and getattr(drafter, "hidden_layers", None):
            want_hidden = tuple(drafter.hidden_layers)  # inner layers' inputs instead of the last state
        # the optional hooks of lossy drafters; duck-typed drafters (no Drafter base) lack them
        finished = getattr(drafter, "finished", None) or (lambda: False)
        cache = KVCache()
        clock = time.perf_counter
        _sync(self.device)
        t_start = clock()

        # 1. prefill
        drafter.reset(list(prompt_ids))
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        logits, fresh = self._run({"input_ids": ids, "past_key_values": cache.hf, "use_cache": True}, want_hidden,
                                  last_only=True)
        first = self._choose(Draft(), logits[-1:], generator).new_tokens[0]
        seq = list(prompt_ids) + [first]
        produced = [first]
        t_now = clock()
        g.prefill_time = t_now - t_start

        # 2. decode
        while len(produced) < max_new_tokens and produced[-1] not in self.eos_ids and not finished():
            t0 = clock()
            state = DecodeState(ids=seq, prompt_len=len(prompt_ids), budget=budget,
                                remaining=max_new_tokens - len(produced), step=g.steps, hidden=fresh)
            draft = drafter.propose(state)                                   # 2a
            t1 = clock()
            if 1 + len(draft) > budget:
                raise BudgetExceeded(f"{drafter.name or type(drafter).__name__} proposed {len(draft)} tokens "
                                     f"at block complexity {budget} (at most {budget - 1})")
            logits, hidden, past, t_model = self._forward(cache, seq[-1], draft, want_hidden)  # 2b
            verdict = self._choose(draft, logits, generator)                 # 2c
            t2 = clock()
            cache.keep(past, [0] + [a + 1 for a in verdict.accepted])        # 2d
            new = verdict.new_tokens
            seq.extend(new)
            produced.extend(new)
            if hidden is not None:  # root + accepted path, in path order
                fresh = hidden[[0] + [a + 1 for a in verdict.accepted]]
            result = VerifyResult(draft, verdict.accepted, new, logits, fresh, verdict.preds, state)
            t3 = clock()
            drafter.observe(result)                                          # 2e
            t4 = clock()
            g.accept_lengths.append(len(new))
            g.draft_sizes.append(draft.n_acceptable())
            g.draft_path_lengths.append(verdict.path_length)
            g.budget_used.append(1 + len(draft))
            drafting, verifying = (t1 - t0) + (t4 - t3), t2 - t_model
            g.step_draft_ms.append(round(1000 * drafting, 3))
            g.step_verify_ms.append(round(1000 * verifying, 3))
            g.draft_time += drafting
            g.verify_time += verifying
            g.overhead_time += (t_model - t1) + (t3 - t2)

        out_ids, epi = self._cut(drafter, produced, max_new_tokens)  # 3.
        if epi is not None:                                            # 4. lossy only
            out_ids = self._epilogue(cache, list(prompt_ids), out_ids, epi, generator, g)
        self._stats(drafter, epi, g)
        _sync(self.device)
        g.wall_time = clock() - t_start
        g.output_ids = out_ids
        return g

    def _cut(self, drafter: Drafter, produced: list[int], max_new_tokens: int) -> tuple[list[int], Any]:
        """The output cut at EOS and at the cap, exactly as for every other method, and the
        drafter's epilogue for it (None unless a lossy drafter asks for one)."""
        out_ids = produced[:max_new_tokens]
        for i, tok in enumerate(out_ids):
            if tok in self.eos_ids:
                out_ids = out_ids[: i + 1]
                break
        epilogue = getattr(drafter, "epilogue", None)
        return out_ids, (epilogue([t for t in out_ids if t not in self.eos_ids]) if epilogue else None)

    @staticmethod
    def _stats(drafter: Drafter, epi: Any, g: Generation) -> None:
        stats = getattr(drafter, "stats", None)
        g.stats = stats() if stats else None
        if epi is not None:
            g.stats = {**(g.stats or {}), "answer_tokens": g.epilogue_tokens}
