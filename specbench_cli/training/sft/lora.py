"""LoRA for `specbench train sft|msn --lora-rank R` (through `peft`, optional extra `[lora]`).

The base weights stay frozen; LoRA matrices A (r, in) and B (out, r) are added to every linear
layer of the decoder (attention q/k/v/o and MLP gate/up/down; not the embeddings or the tied
output head), so W x becomes W x + (alpha / r) B A x. Training, noise and batches are exactly
the full fine-tuning recipe (sft.py); only which parameters the optimizer sees changes.

Every saved folder (checkpoints and the final one) is a plain Hugging Face folder with the
adapter MERGED into the weights (W + (alpha / r) B A), so `specbench run --model PATH` loads it
like any model, without peft. Next to it, `lora_adapter.safetensors` keeps the adapter tensors
alone: resuming reloads the frozen base from --target (it never changes) and these tensors,
which continues exactly where the run stopped (no merge/unmerge round trip).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError
from specbench_cli.training.common.io import DRAFTER_META, write_json

ADAPTER_FILE = "lora_adapter.safetensors"
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PIP_HINT = "pip install 'specbench-cli[lora]'  (or: pip install peft)"


def check_lora(rank: int | None, alpha: float | None) -> None:
    """Option checks, before any model loads: rank >= 1, alpha > 0, and peft importable."""
    if rank is None:
        if alpha is not None:
            raise UsageError("--lora-alpha needs --lora-rank")
        return
    if rank < 1:
        raise UsageError(f"--lora-rank must be >= 1, got {rank}")
    if alpha is not None and alpha <= 0:
        raise UsageError(f"--lora-alpha must be > 0, got {alpha}")
    try:
        import peft  # noqa: F401
    except ImportError:
        raise UsageError(f"--lora-rank needs the peft package, which is not installed: {PIP_HINT}") from None


def wrap(model: Any, rank: int, alpha: float | None = None) -> Any:
    """`model` with LoRA adapters (peft PeftModel; base weights frozen). alpha default 2 * rank.
    No LoRA dropout: runs stay deterministic given (seed, step), as the full recipe is."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=rank, lora_alpha=float(alpha if alpha is not None else 2 * rank), lora_dropout=0.0,
                     target_modules=TARGET_MODULES, bias="none")
    wrapped = get_peft_model(model, cfg)
    found = sum(1 for n, _ in wrapped.named_parameters() if "lora_A" in n)
    if found == 0:
        raise UsageError(f"--lora-rank: the model has no linear layer named {', '.join(TARGET_MODULES)}")
    return wrapped


def lora_stats(model: Any) -> dict:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable_params": trainable, "total_params": total}


def adapter_tensors(model: Any) -> dict:
    """The trainable (LoRA) tensors by their PeftModel parameter name, detached CPU copies."""
    return {n: p.detach().cpu().contiguous().clone() for n, p in model.named_parameters() if p.requires_grad}


def merged_state_dict(model: Any) -> dict:
    """State dict of the underlying model with every LoRA layer merged: key names of the plain
    model (no `base_layer.` / `lora_` entries), weight = W + get_delta_weight (float32, like W).
    Non-destructive: the wrapped model keeps training afterwards unchanged."""
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    merged = {}
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        merged[key.replace(".base_layer.", ".")] = value.detach().clone()
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer):
                for adapter in module.active_adapters:
                    delta = module.get_delta_weight(adapter)
                    merged[f"{name}.weight"] += delta.to(merged[f"{name}.weight"].dtype)
    if getattr(base.config, "tie_word_embeddings", False):
        # a tied head is the embedding (never a LoRA target): saving it again would add a
        # second copy of the 49k x 576 matrix (113 MB for SmolLM2) that the loader ignores
        head = base.get_output_embeddings()
        for name, module in base.named_modules():
            if module is head:
                merged.pop(f"{name}.weight", None)
    return merged


def save_merged(model: Any, tokenizer: Any, out: Path, meta: dict) -> Path:
    """The LoRA run's model folder: merged HF weights + tokenizer + meta + the adapter alone."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.get_base_model().save_pretrained(out, state_dict=merged_state_dict(model))
    tokenizer.save_pretrained(out)
    save_file(adapter_tensors(model), str(out / ADAPTER_FILE))
    write_json(out / DRAFTER_META, meta)
    return out


def restore_adapter(model: Any, ck: Path) -> None:
    """Resume: load a checkpoint's adapter tensors into the freshly wrapped (frozen) base."""
    from safetensors.torch import load_file

    path = Path(ck) / ADAPTER_FILE
    if not path.is_file():
        raise UsageError(f"--resume with --lora-rank: {path} is missing (was the run started without LoRA?)")
    saved = load_file(str(path))
    expected = {n for n, p in model.named_parameters() if p.requires_grad}
    if set(saved) != expected:
        raise UsageError(f"--resume: {path} does not match this LoRA setup (different --lora-rank or model?)")
    params = dict(model.named_parameters())
    import torch

    with torch.no_grad():
        for name, tensor in saved.items():
            if params[name].shape != tensor.shape:
                raise UsageError(f"--resume: {path} has {name} of shape {tuple(tensor.shape)}, "
                                 f"expected {tuple(params[name].shape)} (different --lora-rank?)")
            params[name].copy_(tensor)
