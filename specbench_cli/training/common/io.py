"""Output folders and small files every trainer writes: model folders, atomic JSON, text inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench_cli.atomic import (
    OutputFolder,
    atomic_write,
    clear_output,
    link_problem,
    output_folder_problem,
    output_problem,
    write_staged,
)
from specbench_cli.errors import UsageError
from specbench_cli.jsonl import read_bytes

DRAFTER_META = "specbench_drafter.json"
# every name `save_pretrained` of a model and its tokenizer writes at the top of a folder (the
# tokenizer's vocabulary files depend on its kind): what a model output folder holds of its own
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors",
               "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
               "added_tokens.json", "chat_template.jinja", "chat_template.json", "tokenizer.model", "vocab.json",
               "vocab.txt", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "*.tiktoken")
# `train drafter subclone`'s output: a model folder and its record
SUBCLONE_OUTPUT = OutputFolder("train drafter subclone", "a model", DRAFTER_META, (*MODEL_FILES, DRAFTER_META))


def save_model_folder(model: Any, tokenizer: Any, out: Path, meta: dict) -> Path:
    """Write `model` + `tokenizer` as a Hugging Face folder that `load_model(out)` can read,
    plus `specbench_drafter.json` with `meta` (how it was made)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_json(out / DRAFTER_META, meta)
    return out


def save_model_folder_staged(model: Any, tokenizer: Any, out: Path, meta: dict) -> Path:
    """`save_model_folder` into an existing output folder: written into a fresh folder inside
    `out` and renamed into place file by file (atomic.py `write_staged`), so a link at one of its
    names is replaced, never written through."""
    write_staged(out, lambda stage: save_model_folder(model, tokenizer, stage, meta))
    return Path(out)


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (tmp file + rename)."""
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")


def check_new_output(out: Path, force: bool = False, spec: OutputFolder = SUBCLONE_OUTPUT,
                     flag: str = "--output") -> Path:
    """A model output folder (`flag`, as the command spells it): new, empty, or an earlier output
    of `spec`'s command replaced with `force`; never a link, never a folder holding other files
    (atomic.py `output_folder_problem`). Checked before any model loads; nothing is removed here."""
    out = Path(out).expanduser()
    if problem := output_folder_problem(out, spec, force):
        raise UsageError(f"{flag}: {problem}")
    return out


def check_resume_output(out: Path, flag: str = "--output") -> Path:
    """The folder `--resume` continues in: an existing folder, not a link (its files are kept;
    what is written there replaces, never follows, what is at its names)."""
    out = Path(out).expanduser()
    if out.is_symlink():
        raise UsageError(f"{flag}: {link_problem(out)}")
    if problem := output_problem(out, folder=True):
        raise UsageError(f"{flag}: {problem}")
    return out


def clear_records(out: Path, spec: OutputFolder, names: tuple[str, ...]) -> None:
    """With --force, before training starts over: remove the earlier run's `names` (its record,
    history, checkpoints) from `out`, as `spec` owns them; the model files stay until the new
    model replaces them (the earlier model may be this run's starting point)."""
    clear_output(out, OutputFolder(spec.command, spec.what, spec.marker, names))


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


