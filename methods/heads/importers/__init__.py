"""Published head checkpoints, converted once into this tool's heads folders.

`specbench heads import SRC --out DIR` finds the importer whose `detect(SRC)` recognises the
folder (one module per published layout, in the package of the head kind it converts into:
methods/heads/<kind>/importer*.py), reads its tensors (safetensors, or a pickle only through
`torch.load(weights_only=True)`, which runs no code), checks every key and shape, and writes
`config.json` + safetensors that `--heads DIR` loads, through the one writer of heads folders
(methods/heads/checkpoint.py `write_heads_folder`). Each head kind names its importers in its
declaration (`KIND.importers`); this package holds what they share (common.py) and the command.
The source's config quirks (Medusa-1's wrong head count, EAGLE's optional `bias`, Hydra's
repeated blocks) are resolved from the tensors and the resolution is recorded under
`"specbench"."imported"` in the new config.
"""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.importers.common import Importer, read_config


def importers() -> list[Importer]:
    """Every head kind's importers (its declaration's `importers`), in registration order: the
    first whose `detect` recognises a folder converts it."""
    import importlib

    from specbench_cli.methods.heads import kinds

    return [importlib.import_module(module).IMPORTER for kind in kinds.kinds() for module in kind.importers]


def heads_output(command: str = "heads import"):
    """What a heads folder holds (atomic.py `OutputFolder`): config.json (the marker, written
    last), every head kind's weight file, the draft vocabulary."""
    from specbench_cli.atomic import OutputFolder
    from specbench_cli.methods.heads import kinds
    from specbench_cli.methods.heads.checkpoint import CONFIG_FILE, VOCAB_FILE

    weights = tuple(dict.fromkeys(kind.weights for kind in kinds.kinds()))
    return OutputFolder(command, "heads", CONFIG_FILE, (CONFIG_FILE, VOCAB_FILE, *weights))


def import_heads(src: Path, out: Path, force: bool = False) -> dict:
    """Convert the published heads folder `src` into `out`; returns the importer's summary.
    `out` is new, empty or (with `force`) an earlier heads folder, whose files alone are
    replaced: a folder holding anything else, or a link, is refused (atomic.py)."""
    from specbench_cli.atomic import install_folder, output_folder_problem
    from specbench_cli.methods.heads.checkpoint import inspect_heads

    src, out = Path(src).expanduser(), Path(out).expanduser()
    if not src.is_dir():
        raise UsageError(f"heads to import not found: {src} (a folder)")
    if (src / "config.json").exists():
        read_config(src)  # a damaged config is named here, not passed over by every importer's detect
    spec = heads_output()
    if problem := output_folder_problem(out, spec, force):
        raise UsageError(f"--out: {problem}")
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
            from specbench_cli.models.weights import check_finite_file

            for weights in sorted(tmp.glob("*.safetensors")):  # no NaN or infinity in any tensor
                check_finite_file(weights, src)
        except UsageError as e:  # name the source folder, not the temporary copy
            raise UsageError(str(e).replace(str(tmp), str(src))) from None
        try:  # an earlier heads folder replaced name by name; never a folder holding other files
            install_folder(tmp, out, spec)
        except FileExistsError as e:  # appeared since the check above
            raise UsageError(f"--out: {e}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return {"format": found[0].name, **summary}
