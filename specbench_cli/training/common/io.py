"""Output folders and small files every trainer writes: model folders, atomic JSON, text inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import UsageError
from specbench_cli.jsonl import read_bytes

DRAFTER_META = "specbench_drafter.json"


def save_model_folder(model: Any, tokenizer: Any, out: Path, meta: dict) -> Path:
    """Write `model` + `tokenizer` as a Hugging Face folder that `load_model(out)` can read,
    plus `specbench_drafter.json` with `meta` (how it was made)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_json(out / DRAFTER_META, meta)
    return out


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (tmp file + rename)."""
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")


def check_new_output(out: Path, force: bool = False) -> Path:
    """A model output folder must not already hold a model unless `force`."""
    from specbench_cli.atomic import output_problem

    out = Path(out).expanduser()
    if problem := output_problem(out, folder=True):
        raise UsageError(f"output {problem}")
    if not force and (out / "config.json").exists():
        raise UsageError(f"output folder {out} already holds a model; pass --force to overwrite it")
    return out


def read_text_file(path: Path, what: str = "text file") -> str:
    """Read a UTF-8 text file through the guarded reader (jsonl.py: a FIFO or device refused by
    type, the size bound) or raise a one-line UsageError."""
    try:
        text = read_bytes(path, what).decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text") from None
    if not text.strip():
        raise UsageError(f"{what} {path} is empty")
    return text


