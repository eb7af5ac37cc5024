"""The command line (Typer only): parse, call, print. One module per command group."""
