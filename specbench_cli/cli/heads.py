"""`specbench heads`: published head checkpoints into heads folders `--heads` reads."""

from __future__ import annotations

from pathlib import Path

import typer

from specbench_cli.console import err

heads_app = typer.Typer(no_args_is_help=True, help="Published head checkpoints (EAGLE-1/2/3, HASS, Medusa-1/2, Hydra).")


@heads_app.command("import")
def import_cmd(
    src: Path = typer.Argument(..., metavar="SRC", help="A published heads folder (config.json + weights)."),
    out: Path = typer.Option(..., "--out", "-o", help="The heads folder to write (safetensors + config.json)."),
    force: bool = typer.Option(False, "--force", help="Replace heads already in --out (only a heads folder's own "
                               "files; a folder holding other files is refused even so)."),
) -> None:
    """Convert a published heads folder once (pickles are read with torch.load(weights_only=True))."""
    from specbench_cli.methods.heads.importers import import_heads

    summary = import_heads(src, out, force)
    notes = summary.pop("notes", []) or []
    err.print(f"imported {summary['format']} heads into {out}: " + ", ".join(
        f"{k} {v}" for k, v in summary.items() if k not in ("format",) and v not in (None, [], "")), highlight=False)
    for note in notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    err.print(f"run them with: specbench run --methods {summary['kind']} --heads {out}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(heads_app, name="heads")
