"""`HFTarget`: a transformers causal LM as the target (decoding/target.py), on any of the
forwards of targets/hf/forward/ (`sdpa`, `eager`, `short`, `lean` with its kernel plan).

Two shapes of the same computation, chosen by the batch size, so that batch size 1 costs no
more than a plain decoding loop:

- a batch of one keeps its keys/values in a `KVCache` (targets/hf/kv.py) and verifies a
  chain with no mask at all (the model's causal path) and a tree with the engine's additive
  tree mask (decoding/draft.py: `tree_inputs`);
- a batch of N > 1 keeps one row per sequence in a `BatchKVCache`; every prompt is prefilled on
  its own (the same arithmetic as at N = 1) and copied into its row so that every prompt ends
  at the same slot; each step runs one forward over every row's root + draft, shorter drafts
  padded to the longest (`batch_tree_inputs`: padding rows see only themselves, no real row
  sees them); the output head runs on the real rows only.

Logits: the output head (the largest matrix of a small model: 49152 x 576 for SmolLM2-135M)
runs on the prompt's last row only at a prefill; applying it to every prompt row cost more than
the rest of a 400-token prefill. With hidden states the decoder body runs first and the output
head is applied to its last hidden state (after the final norm), which is what the causal-LM
forward does itself, so the logits are the same. (A model whose causal-LM forward
post-processes logits, e.g. Gemma-2's soft-capping, would need that step here too; the
Llama-family targets used here have none.)
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import torch

from specbench_cli.decoding.draft import Draft, batch_tree_inputs, tree_inputs
from specbench_cli.decoding.target import CAPABILITIES, Batch, Forward, Target, TargetError
from specbench_cli.targets.hf.kv import BatchKVCache, KVCache


class _One(Batch):
    """A batch of one: its `KVCache`."""

    def __init__(self, cache: KVCache) -> None:
        self.cache = cache
        self.rows = 1

    @property
    def length(self) -> int:  # type: ignore[override]
        return self.cache.length


class _Many(Batch):
    """A batch of N > 1: its `BatchKVCache`, one row per live sequence."""

    def __init__(self, cache: BatchKVCache) -> None:
        self.cache = cache

    @property
    def rows(self) -> int:  # type: ignore[override]
        return self.cache.rows

    @property
    def length(self) -> int:  # type: ignore[override]
        return self.cache.length


class HFTarget(Target):
    """A transformers causal LM (any architecture `AutoModelForCausalLM` loads) as the target."""

    name = "hf"
    capabilities = frozenset(CAPABILITIES)
    weights = "transformers"

    def __init__(self, model: Any, forward: Optional[str] = None, kernels: Optional[dict] = None,
                 params: int = 0) -> None:
        self.model = model
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.embed = model.get_input_embeddings()
        self.forward_name = forward
        self.kernels = kernels
        self.params = params

    @classmethod
    def load(cls, ref: str, *, device: str = "cpu", dtype: str = "float32", **options: Any) -> "HFTarget":
        """The causal LM of `resolved` (a Hugging Face folder or hub id; default `ref`) on `device`
        in `dtype`, computing its forward as option `forward` says (default `sdpa`) with, under
        `lean`, the kernels `kernels` names and `kernel_plan` plans (targets/hf/load.py).
        Options `trust_remote_code` and `local_files_only` go to transformers."""
        from specbench_cli.targets.hf import load as hf_load

        loaded = hf_load.load(str(options.get("resolved") or ref), device=device, dtype=dtype,
                              forward=options.get("forward") or "sdpa", kernels=options.get("kernels") or "auto",
                              trust_remote_code=bool(options.get("trust_remote_code", False)),
                              local_files_only=bool(options.get("local_files_only", False)),
                              kernel_plan=options.get("kernel_plan"), native_cache=options.get("native_cache"),
                              note=options.get("note"))
        return cls(loaded.model, loaded.forward, loaded.kernels, params=loaded.params)

    # -- one forward of a batch of one -----------------------------------------------------
    def _run(self, kwargs: dict, want: bool | tuple[int, ...], last_only: bool = False
             ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """`[T, V]` logits (`[1, V]` with `last_only`) and, if wanted, `[T, H']` states."""
        if not want:
            return self.model(**kwargs, **({"logits_to_keep": 1} if last_only else {})).logits[0], None
        head = self.model.get_output_embeddings()
        if isinstance(want, tuple):  # the inputs of chosen layers (hidden_states[i] = input of layer i)
            out = self.model.get_decoder()(**kwargs, output_hidden_states=True)
            hidden = out.last_hidden_state
            feats = torch.cat([out.hidden_states[i] for i in want], dim=-1)
            return head(hidden[:, -1:] if last_only else hidden)[0], feats[0]
        hidden = self.model.get_decoder()(**kwargs).last_hidden_state
        return head(hidden[:, -1:] if last_only else hidden)[0], hidden[0]

    def _prefill(self, prompt: list[int], want: bool | tuple[int, ...]) -> tuple[KVCache, Forward]:
        cache = KVCache()
        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        started = time.perf_counter()
        logits, feats = self._run({"input_ids": ids, "past_key_values": cache.hf, "use_cache": True}, want,
                                  last_only=True)
        return cache, Forward(logits, [feats] if feats is not None else None, started)  # [1, V]

    def _inputs(self, ids: torch.Tensor, drafts: Sequence[Draft]) -> dict[str, Any]:
        """`input_ids`, or `inputs_embeds` when a draft carries ready embeddings for some nodes."""
        if not any(d.embeds for d in drafts):
            return {"input_ids": ids}
        emb = self.embed(ids)
        for b, d in enumerate(drafts):
            for node, vec in (d.embeds or {}).items():
                emb[b, node + 1] = vec.to(emb.dtype)
        return {"inputs_embeds": emb}

    def _verify_one(self, cache: KVCache, root: int, draft: Draft, want: bool | tuple[int, ...]) -> Forward:
        past = cache.length
        ids = torch.tensor([[root] + draft.tokens], dtype=torch.long, device=self.device)
        kwargs: dict[str, Any] = {"past_key_values": cache.hf, "use_cache": True, **self._inputs(ids, [draft])}
        if len(draft) and not draft.is_chain:
            mask, pos = tree_inputs(draft.parents, past, self.dtype, self.device)
            kwargs["attention_mask"] = mask
            kwargs["position_ids"] = pos
        started = time.perf_counter()
        logits, feats = self._run(kwargs, want)
        return Forward(logits, [feats] if feats is not None else None, started)

    # -- one forward of a batch of N ----------------------------------------------------------
    def _verify_many(self, cache: BatchKVCache, roots: Sequence[int], drafts: Sequence[Draft],
                     want: bool | tuple[int, ...]) -> Forward:
        past = cache.length
        q = 1 + max(len(d) for d in drafts)
        rows = [[root] + d.tokens + [root] * (q - 1 - len(d)) for root, d in zip(roots, drafts)]
        ids = torch.tensor(rows, dtype=torch.long, device=self.device)
        mask, pos = batch_tree_inputs([d.parents for d in drafts], cache.starts, cache.ends, past, q,
                                      self.dtype, self.device)
        kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": pos, "past_key_values": cache.hf,
                                  "use_cache": True, **self._inputs(ids, drafts)}
        started = time.perf_counter()
        if isinstance(want, tuple):
            out = self.model.get_decoder()(**kwargs, output_hidden_states=True)
            hidden = out.last_hidden_state
            feats = torch.cat([out.hidden_states[i] for i in want], dim=-1)
        else:
            hidden = self.model.get_decoder()(**kwargs).last_hidden_state
            feats = hidden if want else None
        # the output head on the real rows only, as one block
        real = torch.cat([torch.arange(b * q, b * q + 1 + len(d)) for b, d in enumerate(drafts)]).to(self.device)
        flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, real)
        logits = self.model.get_output_embeddings()(flat.unsqueeze(0))[0]
        per_row = [feats[b, :1 + len(d)] for b, d in enumerate(drafts)] if feats is not None else None
        return Forward(logits, per_row, started)

    # -- the protocol ---------------------------------------------------------------------------
    def start(self, prompts: Sequence[list[int]], room: int, want: bool | tuple[int, ...] = False
              ) -> tuple[Batch, list[Forward]]:
        if not prompts:
            raise ValueError("a batch needs at least one prompt")
        if len(prompts) == 1:
            cache, fwd = self._prefill(list(prompts[0]), want)
            return _One(cache), [fwd]
        longest = max(len(p) for p in prompts)
        many = BatchKVCache(len(prompts), longest + room + 1)
        forwards = []
        for row, prompt in enumerate(prompts):
            single, fwd = self._prefill(list(prompt), want)
            many.load_row(row, single, longest)
            forwards.append(fwd)
            del single
        return _Many(many), forwards

    def join(self, batch: Optional[Batch], prompts: Sequence[list[int]], room: int,
             want: bool | tuple[int, ...] = False) -> tuple[Batch, list[Forward]]:
        """Each prompt prefilled on its own (as `start` does) and copied into a new last row of
        `batch`'s `BatchKVCache` (`add_row`); a running batch of one row keeps that layout too, so
        rows can keep joining. Before the new rows join, a batch whose rows all joined late is
        packed to the front of its buffers (`BatchKVCache.pack`)."""
        if batch is None:
            if not prompts:
                raise ValueError("a new batch needs at least one prompt")
            batch = _Many(BatchKVCache(0, max(len(p) for p in prompts) + room + 1))
        if isinstance(batch, _One):
            raise TargetError("a batch of one that `start` made takes no joins (`join(None, ...)` makes one that does)")
        many = self._many(batch).cache
        many.pack()
        forwards = []
        for prompt in prompts:
            single, fwd = self._prefill(list(prompt), want)
            many.add_row(single)
            forwards.append(fwd)
            del single
        return batch, forwards

    def verify(self, batch: Batch, roots: Sequence[int], drafts: Sequence[Draft],
               want: bool | tuple[int, ...] = False) -> Forward:
        if isinstance(batch, _One):
            return self._verify_one(batch.cache, roots[0], drafts[0], want)
        return self._verify_many(self._many(batch).cache, roots, drafts, want)

    def commit(self, batch: Batch, past: int, keep: Sequence[list[int]]) -> None:
        if isinstance(batch, _One):
            batch.cache.keep(past, list(keep[0]))
        else:
            self._many(batch).cache.keep(past, [list(k) for k in keep])

    def leave(self, batch: Batch, row: int) -> None:
        if isinstance(batch, _One):
            batch.rows = 0  # the cache stays: `detach` may have handed it to an epilogue
        else:
            self._many(batch).cache.drop(row)

    def detach(self, batch: Batch, row: int) -> Batch:
        if isinstance(batch, _One):
            return batch
        return _One(self._many(batch).cache.extract(row))

    def crop(self, batch: Batch, length: int) -> None:
        if not isinstance(batch, _One):
            raise TargetError("crop works on a batch of one (detach the row first)")
        batch.cache.crop_to(length)

    @staticmethod
    def _many(batch: Batch) -> _Many:
        if not isinstance(batch, _Many):
            raise TargetError(f"not a batch of this target: {type(batch).__name__}")
        return batch

    # -- capabilities and description ---------------------------------------------------------
    def token_embeddings(self) -> Any:
        return self.model.get_input_embeddings()

    def output_projection(self) -> Any:
        return self.model.get_output_embeddings()

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def generation_config(self) -> Any:
        return getattr(self.model, "generation_config", None)

    @property
    def vocab_size(self) -> int:
        head = self.model.get_output_embeddings()
        if head is not None and hasattr(head, "weight"):
            return int(head.weight.shape[0])
        return int(self.model.config.vocab_size)

    def kernel_plan(self) -> Any:
        """The lean forward's kernel plan (targets/hf/forward/kernels.py), or None on other forwards."""
        from specbench_cli.targets.hf.forward.lean import installed_plan

        return installed_plan(self.model)

    def describe(self) -> dict:
        plan = self.kernel_plan()
        return {"target": self.name, "forward": self.forward_name, "kernels": self.kernels,
                "kernel_plan": plan.to_dict() if plan is not None else None}

