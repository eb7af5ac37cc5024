"""The progress bar every trainer shows (rich, on stderr): one tick per optimizer step."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def progress_bar(title: str, total: int, done: int, enabled: bool) -> Iterator[Callable[[str], None]]:
    """Yields advance(info): one step done, `info` shown after the bar (rich, on stderr)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from specbench_cli.console import err

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=err,
                  disable=not enabled) as bar:
        task = bar.add_task(title, total=total, completed=done, info="")
        yield lambda info: bar.update(task, advance=1, info=info)
