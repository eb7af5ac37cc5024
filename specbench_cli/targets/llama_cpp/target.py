"""`LlamaCppTarget` (`--target llama.cpp`): specbench's own loop and drafters, every forward
computed by llama.cpp's `llama_decode` on a GGUF file through its C API (targets/llama_cpp/api.py).

One llama.cpp context holds every batch's keys/values in one KV cache shared by all sequences
(`kv_unified`); every row of a batch is a sequence id of its own (its *main* id). How a step maps
onto that cache:

- `start` decodes each prompt on its own sequence (positions 0..T-1, the last token's logits only),
  in calls of at most `n_batch` tokens; a batch of N prompts is N such prefills, the same
  arithmetic as N = 1.
- `verify` is one `llama_decode` over every live row's root + draft nodes, each token with its
  logits. A token attends to the cache cells that carry the *first* of its sequence ids at
  positions up to its own, so a tree is verified by giving each root-to-leaf path a sequence id:
  the first path is the row's main id, every other path gets a spare id whose cells are first
  made to hold the row's cached prefix (`llama_memory_seq_cp`, metadata only: no keys/values are
  copied). The root carries every path id of its row; a node carries the ids of the paths through
  it; a node sits at position past + depth. A node then sees the prefix, the root and its
  ancestors, never a sibling (a cell of another path lies at a position it sees but carries no id
  of its own path).
- `commit` keeps the root and the accepted path in the row's main id (`llama_memory_seq_rm` of the
  rest; when the accepted path is not the first path, its cells get the main id with
  `llama_memory_seq_cp` over exactly its positions) and drops every spare id, which frees the
  cells of rejected nodes. Accepted cells already sit at positions past + depth, which are the
  next tokens' positions, so nothing is recomputed.
- `leave` drops a row's main id (its cells are freed); `detach` hands a row's main id to a batch
  of one; `crop` removes a batch of one's cells from a position on. A batch that is garbage
  collected frees whatever ids it still holds.

What it cannot give: llama.cpp's public API exposes logits (and pooled/last-layer embeddings of an
embedding model), not the last hidden state of a causal LM at chosen tokens, not the inputs of
inner layers, and it cannot take input embeddings mixed with token ids in one batch, so it
declares no capability: methods that need hidden states, layer features or embeddings (heads,
EAGLE, mask-probe) are refused by `run/plan.py` before anything loads.

Numerics: llama.cpp computes a GGUF with its own kernels, so its tokens are compared with AR *on
this target* (the =AR column), never with the transformers target's. `--dtype` sets the KV
cache's type (float32 by default, as on the transformers target); flash attention is off by
default. On a float32 GGUF every lossless method's tokens equal AR's (measured, docs/engines.md).
On a quantised GGUF (the embedded Q4_1) they often do not, and the =AR column says so: each
quantised matrix product first rounds its input activations to 8 bits, which turns last-bit
differences of the attention's summation order into whole quantisation steps (logits move by
~0.3); a tree's cells do not sit where AR's would (rejected branches leave holes that later tokens
fill), and a block of several tokens is not always multiplied with the kernels one token is.
"""

from __future__ import annotations

import ctypes
import os
import time
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Sequence

from specbench_cli.decoding.draft import Draft, depths
from specbench_cli.decoding.target import Batch, Forward, Target, TargetError
from specbench_cli.errors import UsageError

MAX_SEQ = 256          # LLAMA_MAX_SEQ of this release: sequence ids 0..255
N_BATCH = 512          # tokens per llama_decode call (a prefill is cut into such calls)
CTX_ALIGN = 256        # the context is sized in steps of this many cells
CTX_MIN = 4096         # cells of a first context at least (batches may overlap: an epilogue, a test)
GGML_TYPES = {"f32": 0, "f16": 1, "bf16": 30}
CACHE_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}  # --dtype -> the KV cache's type


def open_library(path: Path) -> Any:
    """libllama at `path`, loaded once (`llama_cpp_api.Library`); UsageError (one line, exit 2)
    for a file that is no shared library, one built for another machine, another library under
    libllama's name (a missing function) or another llama.cpp release (`check_layout`)."""
    from specbench_cli.targets.llama_cpp.api import LayoutError, Library

    try:
        return Library.open(path)
    except LayoutError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot load {path}: {e}") from None


class _Book:
    """The sequence ids a batch owns (freed when the batch is collected)."""

    def __init__(self) -> None:
        self.ids: set[int] = set()      # main ids of its rows
        self.spares: set[int] = set()   # path ids of a verify not yet committed


class _Rows(Batch):
    """A batch of the llama.cpp target: per live row its main sequence id and cached length."""

    def __init__(self, target: "LlamaCppTarget") -> None:
        self.seqs: list[int] = []
        self.lengths: list[int] = []
        self.book = _Book()
        self.last: Optional[list[dict]] = None  # the last verify's layout per row (for commit)
        weakref.finalize(self, target._release, self.book)

    @property
    def rows(self) -> int:  # type: ignore[override]
        return len(self.seqs)

    @property
    def length(self) -> int:  # type: ignore[override]
        """A batch of one: its cached length (`past` of the next verify); rows keep their own."""
        return self.lengths[0] if len(self.lengths) == 1 else max(self.lengths, default=0)


class LlamaCppTarget(Target):
    """A GGUF model computed by llama.cpp's C API (module doc)."""

    name = "llama.cpp"
    capabilities = frozenset()

    def __init__(self, lib: Any, model: int, path: Path, *, threads: int, flash_attn: str = "off",
                 cache_type: str = "f32", n_ctx: int = 0) -> None:
        import torch

        self.lib = lib
        self.model = model
        self.path = path
        self.threads = threads
        self.flash_attn = flash_attn
        self.cache_type = cache_type
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.vocab = lib.llama_model_get_vocab(model)
        self._vocab_size = int(lib.llama_vocab_n_tokens(self.vocab))
        self.ctx: Optional[int] = None
        self.n_ctx = 0
        self.min_ctx = n_ctx
        self.mem: Optional[int] = None
        self.free_ids = list(range(MAX_SEQ - 1, -1, -1))  # pop() gives the lowest
        self.batch_cap = 0
        self.cbatch: Any = None

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def check_available(cls) -> None:
        """UsageError naming the build step when llama.cpp's library is not found (run/plan.py
        asks before any model loads)."""
        from specbench_cli.locate import require_llama_cpp

        open_library(require_llama_cpp(library=True).library)  # another library by that name: one line here too

    @classmethod
    def load(cls, ref: str, *, device: str = "cpu", dtype: str = "float32", **options: Any) -> "LlamaCppTarget":
        """`ref`: a model alias whose weights are a GGUF file (the default model) or a .gguf path.
        `resolved`: the file `ref` names, when the model loader resolved it (models/load.py).
        `dtype` is the KV cache's type (float32: f32, float16: f16, bfloat16: bf16); the weights
        keep the GGUF file's own types. Options: `threads` (default: torch's, i.e. the run's
        `--threads`), `engine_bin` (the llama.cpp build prefix), `flash_attn` (off by default;
        auto|on), `cache_type` (overrides dtype's), `n_ctx` (at least this many KV cells; by
        default sized from each batch's needs)."""
        from specbench_cli.locate import require_llama_cpp
        from specbench_cli.targets.llama_cpp.api import ModelParams  # noqa: F401

        if device != "cpu":
            raise UsageError(f"--target llama.cpp runs on the CPU build of llama.cpp (got --device {device})")
        if dtype not in CACHE_TYPES:
            raise UsageError(f"--target llama.cpp: --dtype {dtype} is not one of {', '.join(CACHE_TYPES)}")
        found = require_llama_cpp(options.get("engine_bin"), library=True)
        # the model loader resolves `--model` (an alias, a cached download) and passes the file it
        # found as `resolved`; the engine layer never imports the loader
        location = str(options.get("resolved") or ref)
        if not (location.endswith(".gguf") and Path(location).is_file()):
            raise UsageError(f"--target llama.cpp needs a GGUF model (a .gguf file or an alias of one), not {ref}")
        flash = str(options.get("flash_attn", "off"))
        if flash not in ("auto", "on", "off"):
            raise UsageError(f"llama.cpp option flash_attn: expected auto, on or off (got {flash})")
        cache_type = str(options.get("cache_type", CACHE_TYPES[dtype]))
        if cache_type not in GGML_TYPES:
            raise UsageError(f"llama.cpp option cache_type: expected one of {', '.join(GGML_TYPES)} (got {cache_type})")
        threads = options.get("threads")
        if threads is None:
            import torch

            threads = torch.get_num_threads()
        lib = open_library(found.library)
        from specbench_cli.gguf_header import check_gguf

        check_gguf(location)  # a header llama.cpp would abort on (GGML_ASSERT): one line, exit 2
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        model = lib.llama_model_load_from_file(os.fsencode(location), params)
        if not model:
            raise UsageError(f"llama.cpp could not load {location}: {lib.last_error()}")
        return cls(lib, model, Path(location), threads=int(threads), flash_attn=flash, cache_type=cache_type,
                   n_ctx=int(options.get("n_ctx", 0)))

    def _context(self, cells: int) -> None:
        """A context with at least `cells` KV cells; a smaller one is replaced while no batch holds
        cells in it (a batch's keys/values cannot move to another context)."""
        if self.ctx is not None and cells <= self.n_ctx:
            return
        if self.ctx is not None:
            if len(self.free_ids) != MAX_SEQ:
                raise TargetError(f"llama.cpp context of {self.n_ctx} cells is full and other batches hold cells "
                                  f"in it (needed {cells})")
            self.lib.llama_free(self.ctx)
            self.ctx = None
        n_ctx = -(-max(2 * cells, self.min_ctx, CTX_MIN) // CTX_ALIGN) * CTX_ALIGN
        p = self.lib.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = p.n_ubatch = N_BATCH
        p.n_seq_max = MAX_SEQ
        p.n_outputs_max = 0             # = n_batch: every token of a block has its logits
        p.n_outputs_max_per_seq = 0
        p.n_threads = p.n_threads_batch = self.threads
        p.kv_unified = True             # one cache: a token may carry several sequence ids
        p.flash_attn_type = {"auto": -1, "off": 0, "on": 1}[self.flash_attn]
        p.type_k = p.type_v = GGML_TYPES[self.cache_type]
        p.no_perf = True
        ctx = self.lib.llama_init_from_model(self.model, p)
        if not ctx:
            raise TargetError(f"llama.cpp could not create a context of {n_ctx} cells: {self.lib.last_error()}")
        self.ctx, self.n_ctx = ctx, int(self.lib.llama_n_ctx(ctx))
        self.mem = self.lib.llama_get_memory(ctx)

    def close(self) -> None:
        if self.ctx is not None:
            self.lib.llama_free(self.ctx)
            self.ctx = None
        if self.cbatch is not None:
            self.lib.llama_batch_free(self.cbatch)
            self.cbatch = None
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None

    # -- sequence ids ---------------------------------------------------------------------------
    def _take(self) -> int:
        if not self.free_ids:
            raise TargetError(f"llama.cpp target: all {MAX_SEQ} sequence ids in use (fewer rows or a "
                              f"smaller tree: every root-to-leaf path of a draft needs one)")
        return self.free_ids.pop()

    def _give(self, seq: int) -> None:
        self.lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.free_ids.append(seq)
        self.free_ids.sort(reverse=True)

    def _release(self, book: _Book) -> None:
        if self.ctx is None:
            return
        for seq in sorted(book.ids | book.spares):
            self._give(seq)
        book.ids.clear()
        book.spares.clear()

    # -- one llama_decode ----------------------------------------------------------------------
    def _batch(self, n: int) -> Any:
        if n > self.batch_cap:
            if self.cbatch is not None:
                self.lib.llama_batch_free(self.cbatch)
            self.cbatch = self.lib.llama_batch_init(max(n, N_BATCH), 0, MAX_SEQ)
            self.batch_cap = max(n, N_BATCH)
        return self.cbatch

    def _decode(self, tokens: list[tuple[int, int, Sequence[int], bool]]) -> float:
        """One llama_decode of (token, position, sequence ids, wants logits) entries; returns the
        clock just before it ran."""
        b = self._batch(len(tokens))
        for i, (tok, pos, seqs, out) in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = len(seqs)
            row = b.seq_id[i]
            for k, s in enumerate(seqs):
                row[k] = s
            b.logits[i] = 1 if out else 0
        b.n_tokens = len(tokens)
        started = time.perf_counter()
        rc = self.lib.llama_decode(self.ctx, b)
        if rc != 0:
            raise TargetError(f"llama_decode returned {rc} for a batch of {len(tokens)} tokens "
                              f"({self.lib.last_error()})")
        return started

    def _logits(self, first: int, n: int):
        """`[n, V]` float32 logits of batch tokens first..first+n-1 of the last decode (each marked
        for output)."""
        import torch

        v = self._vocab_size
        ptrs = [self.lib.llama_get_logits_ith(self.ctx, first), self.lib.llama_get_logits_ith(self.ctx, first + n - 1)]
        if not all(ptrs):
            raise TargetError(f"llama.cpp returned no logits ({self.lib.last_error()})")
        base = ctypes.addressof(ptrs[0].contents)
        if ctypes.addressof(ptrs[1].contents) == base + 4 * v * (n - 1):  # one contiguous block
            buf = (ctypes.c_float * (n * v)).from_address(base)
            return torch.frombuffer(buf, dtype=torch.float32).clone().view(n, v)
        out = torch.empty((n, v), dtype=torch.float32)
        for i in range(n):
            ptr = self.lib.llama_get_logits_ith(self.ctx, first + i)
            if not ptr:
                raise TargetError(f"llama.cpp returned no logits ({self.lib.last_error()})")
            out[i] = torch.frombuffer((ctypes.c_float * v).from_address(ctypes.addressof(ptr.contents)),
                                      dtype=torch.float32)
        return out

    # -- the protocol ---------------------------------------------------------------------------
    def start(self, prompts: Sequence[list[int]], room: int, want: bool | tuple[int, ...] = False
              ) -> tuple[Batch, list[Forward]]:
        if not prompts:
            raise ValueError("a batch needs at least one prompt")
        if want:
            raise self.lacks("hidden_states" if want is True else "layer_features")
        in_use = self._cells_in_use()
        self._context(in_use + sum(len(p) + room + 1 for p in prompts))
        batch = _Rows(self)
        forwards = []
        for prompt in prompts:
            if not prompt:
                raise ValueError("an empty prompt has nothing to prefill")
            seq = self._take()
            batch.book.ids.add(seq)
            batch.seqs.append(seq)
            batch.lengths.append(len(prompt))
            started, chunk = None, []
            for lo in range(0, len(prompt), N_BATCH):
                chunk = prompt[lo:lo + N_BATCH]
                last = lo + len(chunk) == len(prompt)
                t = self._decode([(tok, lo + i, (seq,), last and i == len(chunk) - 1) for i, tok in enumerate(chunk)])
                started = started if started is not None else t
            forwards.append(Forward(self._logits(len(chunk) - 1, 1), None, started))
        return batch, forwards

    def _cells_in_use(self) -> int:
        if self.ctx is None:
            return 0
        return sum(int(self.lib.llama_memory_seq_pos_max(self.mem, s)) + 1
                   for s in range(MAX_SEQ) if s not in self.free_ids)

    def verify(self, batch: Batch, roots: Sequence[int], drafts: Sequence[Draft],
               want: bool | tuple[int, ...] = False) -> Forward:
        b = self._rows(batch)
        if want:
            raise self.lacks("hidden_states" if want is True else "layer_features")
        if len(roots) != b.rows or len(drafts) != b.rows:
            raise TargetError(f"verify got {len(roots)} roots and {len(drafts)} drafts for {b.rows} rows")
        if b.last is not None:  # a verify never committed keeps what it wrote (an epilogue's chain)
            if any(len(lay["paths"]) > 1 for lay in b.last):
                raise TargetError("a tree was verified but not committed")
            self.commit(b, b.length, [list(range(1 + len(lay["depths"]))) for lay in b.last])
        tokens: list[tuple[int, int, Sequence[int], bool]] = []
        layout = []
        spares: list[int] = []
        try:
            for seq, past, root, draft in zip(b.seqs, b.lengths, roots, drafts):
                if draft.embeds:
                    raise self.lacks("input_embeddings")
                paths, node_ids = self._paths(seq, draft, spares)
                for extra in paths[1:]:
                    self.lib.llama_memory_seq_cp(self.mem, seq, extra, -1, -1)  # the prefix, in every path
                d = depths(tuple(draft.parents))
                tokens.append((int(root), past, paths, True))
                tokens.extend((int(tok), past + d[i], node_ids[i], True) for i, tok in enumerate(draft.tokens))
                layout.append({"paths": paths, "node_ids": node_ids, "depths": d})
            if len(tokens) > N_BATCH:
                raise TargetError(f"a verify forward of {len(tokens)} tokens exceeds llama.cpp's batch of {N_BATCH}")
            started = self._decode(tokens)
        except Exception:
            for extra in spares:
                self._give(extra)
            raise
        b.book.spares.update(spares)
        b.last = layout
        return Forward(self._logits(0, len(tokens)), None, started)

    def _paths(self, seq: int, draft: Draft, spares: list[int]) -> tuple[list[int], list[list[int]]]:
        """The sequence id of each root-to-leaf path (the first is the row's own) and, per node,
        the ids of the paths through it (ascending path order)."""
        n = len(draft)
        if n == 0 or draft.is_chain:
            return [seq], [[seq]] * n
        has_child = [False] * n
        for p in draft.parents:
            if p >= 0:
                has_child[p] = True
        node_ids: list[list[int]] = [[] for _ in range(n)]
        paths = []
        for leaf in range(n):
            if has_child[leaf]:
                continue
            if paths:
                pid = self._take()
                spares.append(pid)
            else:
                pid = seq
            paths.append(pid)
            node = leaf
            while node >= 0:
                node_ids[node].append(pid)
                node = draft.parents[node]
        return paths, node_ids

    def commit(self, batch: Batch, past: int, keep: Sequence[list[int]]) -> None:
        b = self._rows(batch)
        if b.last is None or len(keep) != b.rows:
            raise TargetError("commit without a verify of the same rows")
        mem = self.lib
        for r, (seq, start, kept, lay) in enumerate(zip(b.seqs, b.lengths, keep, b.last)):
            accepted = [k - 1 for k in kept[1:]]
            depth = len(accepted)
            if accepted and lay["depths"][accepted[-1]] != depth:
                raise TargetError(f"row {r}: kept nodes {accepted} are not a path from the root")
            end = start + 1 + depth                     # first position past the kept path
            if depth and seq not in lay["node_ids"][accepted[-1]]:
                holder = lay["node_ids"][accepted[-1]][0]
                mem.llama_memory_seq_rm(self.mem, seq, start + 1, -1)
                mem.llama_memory_seq_cp(self.mem, holder, seq, start + 1, end)
            else:
                mem.llama_memory_seq_rm(self.mem, seq, end, -1)
            for extra in lay["paths"][1:]:
                self._give(extra)
                b.book.spares.discard(extra)
            b.lengths[r] = end
        b.last = None

    def leave(self, batch: Batch, row: int) -> None:
        b = self._rows(batch)
        if b.last is not None:  # rows change: an uncommitted verify's path ids go now
            for extra in sorted(b.book.spares):
                self._give(extra)
            b.book.spares.clear()
            b.last = None
        seq = b.seqs[row]
        if seq in b.book.ids:
            b.book.ids.discard(seq)
            self._give(seq)
        b.seqs[row], b.lengths[row] = b.seqs[-1], b.lengths[-1]
        b.seqs.pop()
        b.lengths.pop()

    def detach(self, batch: Batch, row: int) -> Batch:
        b = self._rows(batch)
        seq = b.seqs[row]
        one = _Rows(self)
        one.seqs, one.lengths = [seq], [b.lengths[row]]
        if seq in b.book.ids:
            b.book.ids.discard(seq)
            one.book.ids.add(seq)
        return one

    def crop(self, batch: Batch, length: int) -> None:
        b = self._rows(batch)
        if b.rows != 1:
            raise TargetError("crop works on a batch of one (detach the row first)")
        if length < b.lengths[0]:
            self.lib.llama_memory_seq_rm(self.mem, b.seqs[0], length, -1)
            b.lengths[0] = length

    @staticmethod
    def _rows(batch: Batch) -> _Rows:
        if not isinstance(batch, _Rows):
            raise TargetError(f"not a batch of the llama.cpp target: {type(batch).__name__}")
        return batch

    # -- what it says of itself -----------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def generation_config(self) -> Any:
        """The GGUF's end-of-sequence id (`tokenizer.ggml.eos_token_id`), as the transformers target
        reads it from the same file: the same stop tokens on both targets."""
        eos = int(self.lib.llama_vocab_eos(self.vocab))
        return SimpleNamespace(eos_token_id=[eos] if eos >= 0 else [])

    def describe(self) -> dict:
        desc = ctypes.create_string_buffer(256)
        self.lib.llama_model_desc(self.model, desc, 256)
        return {"target": self.name, "gguf": self.path.name, "model": desc.value.decode("utf-8", "replace"),
                "params": int(self.lib.llama_model_n_params(self.model)), "threads": self.threads,
                "flash_attn": self.flash_attn, "cache_type": self.cache_type, "library": str(self.lib.path.name)}
