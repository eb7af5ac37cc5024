"""Shared rich consoles: results on stdout, messages and progress on stderr."""

from rich.console import Console

out = Console()
err = Console(stderr=True)
