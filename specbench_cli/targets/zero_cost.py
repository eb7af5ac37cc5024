"""`ZeroCostTarget` (`--target zero-cost`): a target whose forward costs next to nothing, so a
decoding step costs only specbench's own work (the drafter, the budget, the verdict, the commit),
and which counts every time the loop or a drafter asks for a host value of its outputs.

What it computes. Each prompt has a fixed answer `A`, drawn once from the prompt's tokens with a
seeded generator: spans copied from the prompt or from the answer so far (what prompt lookup and
suffix drafters find) alternating with fresh tokens (what no drafter guesses). The target is a
proper language model over token sequences:

    next(prompt + A[:j])  = A[j]                 (the answer, for as long as it is known)
    next(any other prefix) = a hash of (its last token, its length)

so greedy AR reproduces `A`, every lossless method must too, and a sampled token that leaves the
answer is continued deterministically. No token id below `RESERVED` is ever predicted (those are
the special tokens of the usual tokenizers: end of turn, end of text), so an answer runs to the
length cap. The logits of a row are a fixed noise row (one of `BANK` rows held from the start)
with `PEAK` at the predicted token: a top-k past the first entry is deterministic and distinct,
as drafters that read it (recycling, tr-jacobi, lookahead) expect.

What it counts (`meter`). With `count` on, the logits are a `SyncCounted` tensor: the target's
device is modelled as a device apart from the host (on a CPU too), and every operation that on a
CUDA device makes the host wait for it is counted, and its result is a plain host value:

- a transfer to the host: `tolist`, `item`, `bool`/`int`/`float`/index use, `cpu`, `numpy`,
  `.to("cpu")`, formatting;
- an output whose size depends on the values (`nonzero`, `masked_select`, boolean masks,
  `unique`): the device reports the size to the host;
- indexing with a host list or a host tensor (advanced indexing: the index is copied to the
  device with a blocking copy, which waits for everything queued before it);
- a host tensor written from a device one (`host[idx] = device_values`).

Results of other operations stay `SyncCounted` (they are device values). The count is the
target's, so it is the same whatever device the tensors physically sit on. (One over-count on a
CPU: `.to(target.device)` of a counted tensor names the host there, and counts.)
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

from specbench_cli.decoding.draft import Draft, depths
from specbench_cli.decoding.target import Batch, Forward, Target, TargetError
from specbench_cli.lazy import torch

RESERVED = 16     # token ids below this are never predicted (special tokens: EOS, end of turn)
PEAK = 30.0       # the predicted token's logit; the noise rows lie in [0, 1)
BANK = 64         # noise rows held; row (prediction mod BANK) is a prediction's background
EMBED = 64        # width of the token embedding table (`token_embeddings`)
COPY = 0.5        # chance that the answer's next span is copied from the text so far
SPAN = (4, 16)    # length of a copied span
FRESH = (1, 6)    # length of a span of fresh tokens


class SyncMeter:
    """How many times the host waited for the target's device, by kind (module doc)."""

    def __init__(self) -> None:
        self.count = 0
        self.kinds: Counter = Counter()

    def add(self, kind: str) -> None:
        self.count += 1
        self.kinds[kind] += 1


def _transfers() -> dict:
    T = torch.Tensor
    return {T.tolist: "tolist", T.item: "item", T.__bool__: "bool", T.__int__: "int", T.__float__: "float",
            T.__index__: "index", T.__complex__: "complex", T.cpu: "cpu", T.numpy: "numpy", T.__format__: "format"}


def _sized_by_values() -> dict:
    T = torch.Tensor
    return {T.nonzero: "nonzero", torch.nonzero: "nonzero", T.masked_select: "masked_select",
            torch.masked_select: "masked_select", torch.argwhere: "nonzero", T.argwhere: "nonzero",
            T.unique: "unique", torch.unique: "unique", T.unique_consecutive: "unique",
            torch.unique_consecutive: "unique"}


def _to_host(args: tuple, kwargs: dict) -> bool:
    """Whether a `Tensor.to(...)` call names the host (the CPU) as its destination."""
    dest = kwargs.get("device")
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            dest = a
        elif isinstance(a, torch.Tensor) and not isinstance(a, SyncCounted):
            dest = a.device  # like another (host) tensor
    return dest is not None and torch.device(dest).type == "cpu"


def _host_index(index: Any) -> Optional[str]:
    """`"mask"` for a boolean index, `"host index"` for a list or host tensor index, else None."""
    parts = index if isinstance(index, tuple) else (index,)
    found = None
    for p in parts:
        if isinstance(p, SyncCounted):
            if p.dtype == torch.bool:
                return "mask"
        elif isinstance(p, torch.Tensor):
            if p.dtype == torch.bool:
                return "mask"
            if p.dim() > 0:
                found = "host index"
        elif isinstance(p, (list, range)):
            if any(isinstance(x, bool) for x in p):
                return "mask"
            found = "host index"
    return found


class SyncCounted(torch.Tensor):
    """A tensor of the zero-cost target's device (module doc). A subclass made per target
    (`counted_class`) carries that target's meter in `meter`."""

    meter: SyncMeter = SyncMeter()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _TRANSFERS.get(func)
        if kind is None and func is torch.Tensor.to and _to_host(args, kwargs):
            kind = "cpu"
        if kind is not None:
            cls.meter.add(kind)
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
                if isinstance(out, torch.Tensor):  # `cpu()` of a tensor already there returns itself
                    out = out.as_subclass(torch.Tensor)
            return out  # a host value: plain from here on
        kind = _SIZED.get(func)
        if kind is None and func is torch.Tensor.__getitem__:
            kind = _host_index(args[1])
        if func is torch.Tensor.__setitem__:
            kind = _host_index(args[1])
            if not isinstance(args[0], SyncCounted):  # a host tensor written from the device
                kind = "to host"
        if func is torch.where and len(args) + len(kwargs) == 1:
            kind = "nonzero"
        if kind is not None:
            cls.meter.add(kind)
        return super().__torch_function__(func, types, args, kwargs)


_TRANSFERS: dict = {}
_SIZED: dict = {}


def counted_class(meter: SyncMeter) -> type:
    """A `SyncCounted` subclass that counts into `meter`."""
    if not _TRANSFERS:
        _TRANSFERS.update(_transfers())
        _SIZED.update(_sized_by_values())
    return type("SyncCounted", (SyncCounted,), {"meter": meter})


def answer_for(prompt: Sequence[int], length: int, vocab: int, seed: int = 0) -> list[int]:
    """The fixed answer of `prompt` (module doc): `length` tokens in `RESERVED..vocab-1`."""
    rng = random.Random(repr((seed, vocab, list(prompt))))  # a str seed: the same in every process
    text = [t for t in prompt if RESERVED <= t < vocab]
    answer: list[int] = []
    while len(answer) < length:
        if len(text) > SPAN[0] and rng.random() < COPY:
            start = rng.randrange(len(text) - SPAN[0])
            span = text[start:start + rng.randint(*SPAN)]
        else:
            span = [rng.randrange(RESERVED, vocab) for _ in range(rng.randint(*FRESH))]
        answer += span
        text += span
    return answer[:length]


class _ZeroCostRow:
    """One sequence of a batch: the text its model knows (prompt + answer) and what is cached."""

    def __init__(self, prompt: Sequence[int], answer: list[int]) -> None:
        self.prompt_len = len(prompt)
        self.full = list(prompt) + answer  # next(full[:j]) = full[j] for j >= prompt_len
        self.tokens = list(prompt)         # every cached token (the root of a step is never cached)
        self.on = True                     # tokens == full[:len(tokens)]
        self.pending: Optional[tuple[list[int], list[bool]]] = None  # the last verify's tokens, "on" flags

    def recheck(self) -> None:
        n = len(self.tokens)
        self.on = n <= len(self.full) and self.tokens == self.full[:n]


class _ZeroCostBatch(Batch):
    """A batch of the zero-cost target: one `_ZeroCostRow` per live row."""

    def __init__(self, seqs: list[_ZeroCostRow]) -> None:
        self.seqs = seqs

    @property
    def rows(self) -> int:  # type: ignore[override]
        return len(self.seqs)

    @property
    def length(self) -> int:  # type: ignore[override]
        return max((len(s.tokens) for s in self.seqs), default=0)


def config_vocab(folder: str) -> Optional[int]:
    """`vocab_size` of a model folder's config.json (or of its `text_config`), or None."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > RESERVED else None


class ZeroCostTarget(Target):
    """A target whose forward returns logits it holds (module doc). `vocab`: the logits' width;
    `count`: return the logits as `SyncCounted` tensors counting into `meter`; `device`: where
    the logits live (they are built there from the held noise rows)."""

    name = "zero-cost"
    # mask-probe's: a token embedding table (random, `EMBED` wide) and drafts with ready input
    # embeddings (a node fed a vector predicts as if it held its `tokens` entry)
    capabilities = frozenset({"token_embeddings", "input_embeddings"})

    def __init__(self, vocab: int = 32000, device: Any = "cpu", count: bool = True, seed: int = 0) -> None:
        if vocab <= RESERVED:
            raise ValueError(f"zero-cost target: vocab must exceed {RESERVED}")
        self.vocab = int(vocab)
        self.device = torch.device(device)
        self.dtype = torch.float32
        self.seed = seed
        self.meter = SyncMeter()
        self.counted = counted_class(self.meter) if count else None
        gen = torch.Generator().manual_seed(seed)
        self.bank = torch.rand((BANK, self.vocab), generator=gen).to(self.device)
        self._embed = None

    @classmethod
    def load(cls, ref: str, *, device: str = "cpu", dtype: str = "float32", **options: Any) -> "ZeroCostTarget":
        """`ref`'s weights are never read (the run's tokenizer comes from it); the vocabulary is
        its config.json's `vocab_size` where `resolved` (or `ref`) is a model folder, so every
        token decodes, else 32000. Options: `vocab`, `seed`, `count`."""
        vocab = options.get("vocab") or config_vocab(str(options.get("resolved") or ref)) or 32000
        return cls(vocab=int(vocab), device=device, count=bool(options.get("count", True)),
                   seed=int(options.get("seed", 0)))

    # -- the model ------------------------------------------------------------------------------
    def other(self, token: int, length: int) -> int:
        """The prediction after any prefix off the answer: a hash of its last token and length."""
        return RESERVED + (token * 1103515245 + length * 12345 + self.seed) % (self.vocab - RESERVED)

    def _predict(self, seq: _ZeroCostRow, root: int, draft: Draft) -> tuple[list[int], list[bool]]:
        """The prediction of every row (root, then nodes) and whether the row is on the text."""
        full, n = seq.full, len(seq.tokens)  # the root sits at index n
        on = [seq.on and n < len(full) and root == full[n]]
        preds = [self._next(full, on[0], n, root, seq.prompt_len)]
        dep = depths(tuple(draft.parents)) if draft.tokens else ()
        for i, (tok, p) in enumerate(zip(draft.tokens, draft.parents)):
            j = n + dep[i]
            ok = on[p + 1] and j < len(full) and tok == full[j]
            on.append(ok)
            preds.append(self._next(full, ok, j, tok, seq.prompt_len))
        return preds, on

    def _next(self, full: list[int], on: bool, j: int, token: int, prompt_len: int) -> int:
        """The prediction after the prefix ending with `token` at index j."""
        if on and prompt_len <= j + 1 < len(full):
            return full[j + 1]
        return self.other(token, j + 1)

    def _logits(self, preds: list[int]) -> Any:
        idx = torch.tensor(preds, dtype=torch.long)
        logits = self.bank.index_select(0, (idx % BANK).to(self.device))
        logits[torch.arange(len(preds), device=self.device), idx.to(self.device)] = PEAK
        return logits.as_subclass(self.counted) if self.counted is not None else logits

    # -- the protocol ---------------------------------------------------------------------------
    def start(self, prompts: Sequence[list[int]], room: int, want: bool | tuple[int, ...] = False
              ) -> tuple[Batch, list[Forward]]:
        if not prompts:
            raise ValueError("a batch needs at least one prompt")
        return self.join(None, prompts, room, want)

    def join(self, batch: Optional[Batch], prompts: Sequence[list[int]], room: int,
             want: bool | tuple[int, ...] = False) -> tuple[Batch, list[Forward]]:
        if want:
            raise TargetError("target 'zero-cost' gives logits only (no hidden states)")
        rows = self._rows(batch) if batch is not None else _ZeroCostBatch([])
        forwards = []
        for prompt in prompts:
            started = time.perf_counter()
            seq = _ZeroCostRow(prompt, answer_for(prompt, room + 1, self.vocab, self.seed))
            rows.seqs.append(seq)
            forwards.append(Forward(self._logits([seq.full[seq.prompt_len]]), None, started))  # [1, V]
        return rows, forwards

    def verify(self, batch: Batch, roots: Sequence[int], drafts: Sequence[Draft],
               want: bool | tuple[int, ...] = False) -> Forward:
        if want:
            raise TargetError("target 'zero-cost' gives logits only (no hidden states)")
        started = time.perf_counter()
        rows = self._rows(batch)
        preds: list[int] = []
        for seq, root, draft in zip(rows.seqs, roots, drafts):
            p, on = self._predict(seq, root, draft)
            seq.pending = ([root] + list(draft.tokens), on)
            preds += p
        return Forward(self._logits(preds), None, started)

    def commit(self, batch: Batch, past: int, keep: Sequence[list[int]]) -> None:
        for seq, rows in zip(self._rows(batch).seqs, keep):
            if seq.pending is None:
                raise TargetError("commit without a verify")
            tokens, on = seq.pending
            seq.on = seq.on and all(on[r] for r in rows)
            seq.tokens += [tokens[r] for r in rows]
            seq.pending = None

    def leave(self, batch: Batch, row: int) -> None:
        seqs = self._rows(batch).seqs
        seqs[row] = seqs[-1]
        seqs.pop()

    def detach(self, batch: Batch, row: int) -> Batch:
        seq = self._rows(batch).seqs[row]
        twin = _ZeroCostRow(seq.full[:seq.prompt_len], seq.full[seq.prompt_len:])
        twin.tokens, twin.on = list(seq.tokens), seq.on
        return _ZeroCostBatch([twin])

    def crop(self, batch: Batch, length: int) -> None:
        seqs = self._rows(batch).seqs
        if len(seqs) != 1:
            raise TargetError("crop works on a batch of one (detach the row first)")
        seq = seqs[0]
        del seq.tokens[length:]
        seq.recheck()

    @staticmethod
    def _rows(batch: Batch) -> _ZeroCostBatch:
        if not isinstance(batch, _ZeroCostBatch):
            raise TargetError(f"not a batch of this target: {type(batch).__name__}")
        return batch

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def token_embeddings(self) -> Any:
        if self._embed is None:
            weight = torch.randn((self.vocab, EMBED), generator=torch.Generator().manual_seed(self.seed + 1))
            weight = weight.to(self.device)
            if self.counted is not None:  # a device tensor too: a drafter reading it waits for the device
                weight = weight.as_subclass(self.counted)
            self._embed = torch.nn.Embedding.from_pretrained(weight, freeze=True)
        return self._embed

    def describe(self) -> dict:
        return {"target": self.name, "vocab": self.vocab, "counts_syncs": self.counted is not None}
