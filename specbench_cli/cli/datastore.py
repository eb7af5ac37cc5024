"""`specbench datastore build`: a retrieval datastore (rest, samd, suffix) from a text corpus, with the
target's tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer
from rich.markup import escape

from specbench_cli.console import err
from specbench_cli.errors import UsageError, check_not_special
from specbench_cli.models.load import DEFAULT_MODEL

datastore_app = typer.Typer(no_args_is_help=True, help="Datastores for retrieval drafting (rest, samd, suffix).")


def _rows(source: str):
    """(rows, count) of one --from source: a JSON/JSONL file or an hf: dataset."""
    from specbench_cli.tasks.hf import is_hf, load_rows

    if is_hf(source):
        rows, _ = load_rows(source)
        return rows
    path = check_not_special(source, "--from")
    if not path.is_file():
        raise UsageError(f"--from {source}: file not found (a .jsonl/.json file or hf:PATH_OR_ID[:CONFIG][:SPLIT])")
    if path.suffix == ".json":
        from specbench_cli.jsonl import loads

        try:
            data = loads(path.read_text(encoding="utf-8"), f"--from {source}")
        except UnicodeDecodeError as e:
            raise UsageError(f"--from {source}: not readable JSON ({str(e).splitlines()[0]})") from None
        if not isinstance(data, list):
            raise UsageError(f"--from {source}: a .json corpus must be a list of rows (ShareGPT layout)")
        return data
    from specbench_cli.jsonl import read_objects

    return [row for _, row in read_objects(path, "corpus file")]


@datastore_app.command("build")
def build_cmd(
    sources: List[str] = typer.Option(..., "--from", help="Corpus: a .jsonl/.json file (ShareGPT conversations, "
                                      "instruction/response or text rows) or hf:PATH_OR_ID[:CONFIG][:SPLIT]; "
                                      "repeatable."),
    out: Path = typer.Option(..., "--out", "-o", help="The datastore folder to write."),
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="The target whose tokenizer indexes the text."),
    force: bool = typer.Option(False, "--force", help="Replace a datastore already in --out (only a datastore's own "
                               "files; a folder holding other files is refused even so)."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code"),
) -> None:
    """Tokenise a corpus with the target's tokenizer into a datastore for `-o rest.datastore=OUT`,
    `-o samd.datastore=OUT` or `-o suffix.datastore=OUT` (rest also needs draftretriever's index,
    built when the library is installed)."""
    import time

    from specbench_cli.atomic import output_folder_problem
    from specbench_cli.methods.retrieval import datastore as store

    out = out.expanduser()
    if problem := output_folder_problem(out, store.OUTPUT, force):  # a link, a file, others' files: refused
        raise UsageError(f"--out: {problem}")
    rows = []
    for source in sources:
        rows += list(_rows(source))  # every source read (and checked) before the tokenizer loads
    from specbench_cli.models.load import load_tokenizer

    t0 = time.time()
    tokenizer = load_tokenizer(model, trust_remote_code=trust_remote_code)
    meta = store.build(rows, tokenizer, out, list(sources))
    index = (f"rest's index {meta['index_bytes'] / 1e6:.1f} MB" if meta["index_bytes"] is not None
             else f"no index for rest ({store.INSTALL} and build again)")
    err.print(escape(f"datastore {out}: {meta['entries']} texts, {meta['tokens']} tokens, {index}, "
                     f"{time.time() - t0:.1f} s"), highlight=False)  # escaped: "specbench-cli[rest]" is not markup
    users = ("rest", "samd", "suffix") if meta["index_bytes"] is not None else ("samd", "suffix")
    err.print(escape(f"use it with: specbench run --model {model} --methods {users[0]} -o {users[0]}.datastore={out} "
                     f"(it serves {', '.join(users)})"), highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(datastore_app, name="datastore")
