"""Published head checkpoints, converted once into this tool's heads folders.

`specbench heads import SRC --out DIR` finds the importer whose `detect(SRC)` recognises the
folder (one module per published layout in this package), reads its tensors (safetensors, or a
pickle only through `torch.load(weights_only=True)`, which runs no code), checks every key and
shape, and writes `config.json` + safetensors that `--heads DIR` loads. The source's config
quirks (Medusa-1's wrong head count, EAGLE's optional `bias`) are resolved from the tensors and
the resolution is recorded under `"specbench"."imported"` in the new config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

from specbench_cli.errors import UsageError


class Importer(NamedTuple):
    name: str                                  # the published layout, as users call it
    detect: Callable[[Path], bool]             # cheap: file names and config keys only
    convert: Callable[[Path, Path], dict]      # (src, out) -> a summary for the user


def importers() -> list[Importer]:
    from specbench_cli.methods.heads.importers import eagle, medusa

    return [eagle.IMPORTER, medusa.IMPORTER]


def read_config(src: Path) -> dict:
    path = src / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{src} has no config.json (a published heads folder has one)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path} is not JSON text ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{path} must hold a JSON object, not {type(cfg).__name__}")
    return cfg


def read_tensors(path: Path) -> dict[str, Any]:
    """{key: tensor} from a safetensors file or a PyTorch pickle (weights only: no code runs)."""
    import torch
    from safetensors.torch import load_file

    from specbench_cli.models.weights import file_kind, safetensors_header

    kind = file_kind(path)
    if kind == "safetensors" or path.suffix == ".safetensors":  # a pickle named .safetensors is refused
        safetensors_header(path)  # whole, not truncated
        return load_file(str(path))
    if kind not in ("torch-zip", "pickle"):
        raise UsageError(f"{path} is neither safetensors nor a PyTorch checkpoint ({kind} content)")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any refusal (code in the pickle, damage) is the file's problem
        raise UsageError(f"{path}: not a plain tensor checkpoint ({str(e).splitlines()[0][:160]})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise UsageError(f"{path}: expected a mapping of names to tensors")
    return state


def first_file(src: Path, names: tuple[str, ...]) -> Path | None:
    return next((src / n for n in names if (src / n).is_file()), None)


def import_heads(src: Path, out: Path, force: bool = False) -> dict:
    """Convert the published heads folder `src` into `out`; returns the importer's summary."""
    from specbench_cli.atomic import output_problem
    from specbench_cli.methods.heads.model import inspect_heads

    src, out = Path(src).expanduser(), Path(out).expanduser()
    if not src.is_dir():
        raise UsageError(f"heads to import not found: {src} (a folder)")
    if problem := output_problem(out, folder=True):
        raise UsageError(f"--out: {problem}")
    if (out / "config.json").exists() and not force:
        raise UsageError(f"{out} already holds heads; pass --force to overwrite them")
    found = [imp for imp in importers() if imp.detect(src)]
    if not found:
        names = ", ".join(imp.name for imp in importers())
        raise UsageError(f"{src} is not a published heads folder this tool reads ({names})")
    import shutil
    import tempfile

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.import-", dir=out.parent))
    try:
        summary = found[0].convert(src, tmp)
        try:
            inspect_heads(tmp)  # what was written loads: keys and shapes against its own config
        except UsageError as e:  # name the source folder, not the temporary copy
            raise UsageError(str(e).replace(str(tmp), str(src))) from None
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return {"format": found[0].name, **summary}
