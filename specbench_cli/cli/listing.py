"""`specbench list`: what each registry holds (methods, tasks and task sources, report formats,
targets, head kinds) and the model aliases. Built-ins and the entries of installed packages
alike: every list is read from its registry."""

from __future__ import annotations

import typer

from specbench_cli.console import out

LISTS = ("methods", "tasks", "models", "formats", "targets", "head-kinds")


def list_(what: str = typer.Argument(..., help=" | ".join(LISTS))) -> None:
    """List registered methods, tasks, report formats, targets, head kinds or model aliases."""
    from rich.table import Table

    if what == "methods":
        from specbench_cli import methods as reg

        t = Table("name", "lossless", "needs training", "summary")
        for n in reg.names():  # read from source: listing imports no method (and no torch)
            d = reg.describe(n)
            t.add_row(n, "yes" if d["lossless"] else "no", "yes" if d["needs_training"] else "no", d["summary"])
        from specbench_cli.servers import registry as engine_methods  # ENGINE:METHOD (docs/engines.md)

        for n in engine_methods.names():
            t.add_row(n, "yes", "no", engine_methods.describe(n)["summary"])
    elif what == "tasks":
        from specbench_cli import tasks as reg

        t = Table("name", "reads", "summary")
        for n in reg.names():
            d = reg.describe(n)
            t.add_row(n, "--questions" if d["takes_questions_file"] else "", d["summary"])
        for source in reg.sources():
            t.add_row(source.usage, "", source.summary)
    elif what == "formats":
        from specbench_cli.report import formats as reg

        t = Table("name", "file", "summary")
        for n in reg.names():
            d = reg.describe(n)
            t.add_row(n, f"table.{d['extension']}", d["summary"])
    elif what == "targets":
        from specbench_cli import targets as reg

        t = Table("name", "class")
        for n in reg.names():  # not imported: a target module may import its runtime
            t.add_row(n, reg.REGISTRY[n])
    elif what == "head-kinds":
        from specbench_cli.methods.heads import kinds as reg

        t = Table("kind", "weights", "train with")
        for n in reg.names():
            d = reg.describe(n)
            t.add_row(n, d["weights"], f"specbench train heads --kind {n}{d['train_flags']}")
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

        raise unknown("list target", what, LISTS)
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command("list")(list_)
