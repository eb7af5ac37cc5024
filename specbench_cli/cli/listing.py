"""`specbench list`: registered methods, tasks and model aliases."""

from __future__ import annotations

import typer

from specbench_cli.console import out


def list_(what: str = typer.Argument(..., help="methods, tasks or models")) -> None:
    """List registered methods, tasks or model aliases."""
    from rich.table import Table

    if what == "methods":
        from specbench_cli import methods as reg

        t = Table("name", "lossless", "needs training", "summary")
        for n in reg.names():  # read from source: listing imports no method (and no torch)
            d = reg.describe(n)
            t.add_row(n, "yes" if d["lossless"] else "no", "yes" if d["needs_training"] else "no", d["summary"])
    elif what == "tasks":
        from specbench_cli import tasks as reg

        t = Table("name", "summary")
        for n in reg.names():
            t.add_row(n, reg.describe(n)["summary"])
    elif what == "models":
        from specbench_cli.models.load import ALIASES, DEFAULT_MODEL

        t = Table("alias", "default", "what")
        for alias, (_, _, desc) in ALIASES.items():
            t.add_row(alias, "yes" if alias == DEFAULT_MODEL else "", desc)
        out.print(t)
        out.print("Any Hugging Face model id, local model folder or .gguf file also works as --model.")
        return
    else:
        from specbench_cli.errors import unknown

        raise unknown("list target", what, ["methods", "tasks", "models"])
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command("list")(list_)
