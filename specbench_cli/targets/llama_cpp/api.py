"""The few calls of llama.cpp's C API (`include/llama.h`) that `LlamaCppTarget` uses, through ctypes.

Only what the target needs: backend init, model load and free, a context (its size, batch, number
of sequences, threads, one shared KV cache, logits for every batch token), vocabulary size, batch
alloc/free, decode, the logits of output row i, and the KV memory's sequence edits (seq_rm,
seq_cp, seq_keep, seq_pos_max).

The three structs are written field by field in the order of the header of the llama.cpp
release tools/build-llama-cpp.sh builds (llama-cpp-python 0.3.36's vendored tree); a struct laid
out for another release would be read wrongly, so `Library.check_layout` reads the defaults the
library itself returns and refuses values no build would set (a shifted field shows up there).
No other Python package is involved (no llama-cpp-python).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_bool, c_char_p, c_float, c_int, c_int8, c_int32, c_size_t, c_uint32, c_void_p
from pathlib import Path
from typing import Optional

llama_token = c_int32
llama_pos = c_int32
llama_seq_id = c_int32

LLAMA_FLASH_ATTN_TYPE_AUTO = -1
LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
LLAMA_FLASH_ATTN_TYPE_ENABLED = 1
LLAMA_SPLIT_MODE_NONE = 0


class ModelParams(Structure):
    """`struct llama_model_params`."""

    _fields_ = [
        ("devices", c_void_p),
        ("tensor_buft_overrides", c_void_p),
        ("n_gpu_layers", c_int32),
        ("split_mode", c_int),
        ("load_mode", c_int),
        ("lazy_mode", c_int),
        ("main_gpu", c_int32),
        ("tensor_split", c_void_p),
        ("progress_callback", c_void_p),
        ("progress_callback_user_data", c_void_p),
        ("kv_overrides", c_void_p),
        ("vocab_only", c_bool),
        ("check_tensors", c_bool),
        ("use_extra_bufts", c_bool),
        ("no_host", c_bool),
        ("no_alloc", c_bool),
        ("load_mtp", c_bool),
    ]


class ContextParams(Structure):
    """`struct llama_context_params`."""

    _fields_ = [
        ("n_ctx", c_uint32),
        ("n_batch", c_uint32),
        ("n_ubatch", c_uint32),
        ("n_seq_max", c_uint32),
        ("n_rs_seq", c_uint32),
        ("n_outputs_max", c_uint32),
        ("n_outputs_max_per_seq", c_uint32),
        ("n_threads", c_int32),
        ("n_threads_batch", c_int32),
        ("ctx_type", c_int),
        ("rope_scaling_type", c_int),
        ("pooling_type", c_int),
        ("attention_type", c_int),
        ("flash_attn_type", c_int),
        ("rope_freq_base", c_float),
        ("rope_freq_scale", c_float),
        ("yarn_ext_factor", c_float),
        ("yarn_attn_factor", c_float),
        ("yarn_beta_fast", c_float),
        ("yarn_beta_slow", c_float),
        ("yarn_orig_ctx", c_uint32),
        ("defrag_thold", c_float),
        ("cb_eval", c_void_p),
        ("cb_eval_user_data", c_void_p),
        ("type_k", c_int),
        ("type_v", c_int),
        ("abort_callback", c_void_p),
        ("abort_callback_data", c_void_p),
        ("embeddings", c_bool),
        ("offload_kqv", c_bool),
        ("no_perf", c_bool),
        ("op_offload", c_bool),
        ("swa_full", c_bool),
        ("kv_unified", c_bool),
        ("samplers", c_void_p),
        ("n_samplers", c_size_t),
        ("ctx_other", c_void_p),
    ]


class LlamaBatch(Structure):
    """`struct llama_batch` (arrays allocated by `llama_batch_init` for n_tokens and n_seq_max ids)."""

    _fields_ = [
        ("n_tokens", c_int32),
        ("token", POINTER(llama_token)),
        ("embd", POINTER(c_float)),
        ("pos", POINTER(llama_pos)),
        ("n_seq_id", POINTER(c_int32)),
        ("seq_id", POINTER(POINTER(llama_seq_id))),
        ("logits", POINTER(c_int8)),
    ]


# the sizes this layout has on a 64-bit build (what the C compiler gives for the same header)
EXPECTED_SIZES = {ModelParams: 80, ContextParams: 160, LlamaBatch: 56}

# name -> (result type, argument types)
_SIGNATURES = {
    "llama_backend_init": (None, []),
    "llama_model_default_params": (ModelParams, []),
    "llama_context_default_params": (ContextParams, []),
    "llama_model_load_from_file": (c_void_p, [c_char_p, ModelParams]),
    "llama_model_free": (None, [c_void_p]),
    "llama_init_from_model": (c_void_p, [c_void_p, ContextParams]),
    "llama_free": (None, [c_void_p]),
    "llama_n_ctx": (c_uint32, [c_void_p]),
    "llama_n_batch": (c_uint32, [c_void_p]),
    "llama_n_seq_max": (c_uint32, [c_void_p]),
    "llama_model_get_vocab": (c_void_p, [c_void_p]),
    "llama_vocab_n_tokens": (c_int32, [c_void_p]),
    "llama_vocab_eos": (llama_token, [c_void_p]),
    "llama_model_n_params": (ctypes.c_uint64, [c_void_p]),
    "llama_model_desc": (c_int32, [c_void_p, c_char_p, c_size_t]),
    "llama_batch_init": (LlamaBatch, [c_int32, c_int32, c_int32]),
    "llama_batch_free": (None, [LlamaBatch]),
    "llama_decode": (c_int32, [c_void_p, LlamaBatch]),
    "llama_get_logits_ith": (POINTER(c_float), [c_void_p, c_int32]),
    "llama_get_memory": (c_void_p, [c_void_p]),
    "llama_memory_clear": (None, [c_void_p, c_bool]),
    "llama_memory_seq_rm": (c_bool, [c_void_p, llama_seq_id, llama_pos, llama_pos]),
    "llama_memory_seq_cp": (None, [c_void_p, llama_seq_id, llama_seq_id, llama_pos, llama_pos]),
    "llama_memory_seq_keep": (None, [c_void_p, llama_seq_id]),
    "llama_memory_seq_pos_max": (llama_pos, [c_void_p, llama_seq_id]),
    "llama_log_set": (None, [c_void_p, c_void_p]),
}

# ggml_log_callback: void (*)(enum ggml_log_level level, const char * text, void * user_data)
LOG_CALLBACK = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)
GGML_LOG_LEVEL_WARN = 3  # enum ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5


class LayoutError(RuntimeError):
    """The library's default parameters do not read as this module's struct layout expects."""


class Library:
    """libllama loaded once, its functions typed (`lib.llama_decode(...)`)."""

    _loaded: dict[str, "Library"] = {}

    def __init__(self, path: Path) -> None:
        # the ggml libraries sit beside libllama; its RPATH finds them, global so that every
        # backend sees the same ggml
        self.path = path
        self.dll = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                fn = getattr(self.dll, name)
            except AttributeError:  # another library under libllama's name
                raise LayoutError(f"{path} is not llama.cpp's library (it has no {name})") from None
            fn.restype = restype
            fn.argtypes = argtypes
        self._log_cb = LOG_CALLBACK(self._log)  # kept alive as long as the library
        self.log_lines: list[str] = []
        self.dll.llama_log_set(ctypes.cast(self._log_cb, c_void_p), None)
        self.dll.llama_backend_init()
        self.check_layout()

    @classmethod
    def open(cls, path: Path) -> "Library":
        key = str(Path(path).resolve())
        if key not in cls._loaded:
            cls._loaded[key] = cls(Path(path))
        return cls._loaded[key]

    def __getattr__(self, name: str):
        if name.startswith("llama_"):
            return getattr(self.dll, name)
        raise AttributeError(name)

    def _log(self, level: int, text: Optional[bytes], _user: Optional[int]) -> None:
        """llama.cpp's log: warnings and errors kept (the last 50 lines, for error messages), the
        rest dropped (it logs every tensor at load)."""
        if level in (GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_WARN + 1) and text:
            self.log_lines.append(text.decode("utf-8", "replace").rstrip())
            del self.log_lines[:-50]

    def last_error(self) -> str:
        return self.log_lines[-1] if self.log_lines else "no message from llama.cpp"

    def check_layout(self) -> None:
        """The defaults llama.cpp fills in, read through this module's structs, must be the ones
        its header documents: a struct laid out for another release reads shifted values."""
        for struct, size in EXPECTED_SIZES.items():
            if ctypes.sizeof(struct) != size:
                raise LayoutError(f"{struct.__name__} is {ctypes.sizeof(struct)} bytes here, expected {size}")
        m = self.dll.llama_model_default_params()
        c = self.dll.llama_context_default_params()
        problems = []
        if m.devices or m.tensor_buft_overrides or m.kv_overrides or m.vocab_only or m.no_alloc or m.load_mtp:
            problems.append("model params: pointers or flags set that default to NULL/false")
        if not m.use_extra_bufts:
            problems.append("model params: use_extra_bufts not set")
        if not (0 < c.n_ctx <= 1 << 20 and 0 < c.n_ubatch <= c.n_batch <= 1 << 20 and c.n_seq_max == 1):
            problems.append(f"context params: n_ctx {c.n_ctx}, n_batch {c.n_batch}, n_ubatch {c.n_ubatch}, "
                            f"n_seq_max {c.n_seq_max}")
        if not (c.flash_attn_type in (-1, 0, 1) and c.yarn_ext_factor == -1.0 and c.type_k == c.type_v == 1):
            problems.append(f"context params: flash_attn_type {c.flash_attn_type}, yarn_ext_factor "
                            f"{c.yarn_ext_factor}, type_k {c.type_k}")  # GGML_TYPE_F16 = 1
        if c.cb_eval or c.abort_callback or c.embeddings or not c.offload_kqv or c.samplers or c.n_samplers or c.ctx_other:
            problems.append("context params: pointers or flags that default to NULL/false/true read otherwise")
        if problems:
            raise LayoutError(f"{self.path} is not the llama.cpp release these bindings were written for: "
                              + "; ".join(problems))
