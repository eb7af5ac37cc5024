"""Published head checkpoints, converted once into this tool's heads folders.

`specbench heads import SRC --out DIR` finds the importer whose `detect(SRC)` recognises the
folder (one module per published layout in this package), reads its tensors (safetensors, or a
pickle only through `torch.load(weights_only=True)`, which runs no code), checks every key and
shape, and writes `config.json` + safetensors that `--heads DIR` loads, through the one writer of
heads folders (methods/heads/checkpoint.py `write_heads_folder`). Each head kind names its
importers in its declaration (methods/heads/kinds/). The source's config
quirks (Medusa-1's wrong head count, EAGLE's optional `bias`, Hydra's repeated blocks) are resolved from the tensors and
the resolution is recorded under `"specbench"."imported"` in the new config.
"""

from __future__ import annotations

from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.importers.common import Importer


def importers() -> list[Importer]:
    """Every head kind's importers (methods/heads/kinds/), in registration order: the first whose
    `detect` recognises a folder converts it."""
    import importlib

    from specbench_cli.methods.heads import kinds

    return [importlib.import_module(module).IMPORTER for kind in kinds.kinds() for module in kind.importers]


def import_heads(src: Path, out: Path, force: bool = False) -> dict:
    """Convert the published heads folder `src` into `out`; returns the importer's summary."""
    from specbench_cli.atomic import output_problem
    from specbench_cli.methods.heads.checkpoint import inspect_heads

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
            from specbench_cli.models.weights import check_finite_file

            for weights in sorted(tmp.glob("*.safetensors")):  # no NaN or infinity in any tensor
                check_finite_file(weights, src)
        except UsageError as e:  # name the source folder, not the temporary copy
            raise UsageError(str(e).replace(str(tmp), str(src))) from None
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return {"format": found[0].name, **summary}
