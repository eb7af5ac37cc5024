"""The checks of the engine options (`--engine-bin`, `--engine-url`, `--engine-timeout`): the
servers that engine methods (`ENGINE:METHOD`, servers/) start or reach. Nothing is started or
reached here."""

from __future__ import annotations

from typing import Any, Optional

from specbench_cli.errors import UsageError


def check_engine_urls(values: Any) -> list[str]:
    """--engine-url values: URL or METHOD=URL, each URL http(s)://..."""
    values = list(values or [])
    for v in values:
        url = v.split("=", 1)[1] if "=" in v.split("://", 1)[0] else v
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--engine-url {v}: expected URL or METHOD=URL with an http:// or https:// URL")
    return values


def check_engine_bin(value: Optional[str]) -> Optional[str]:
    from specbench_cli.locate import split_engine_bin

    split_engine_bin(value)  # ENGINE=PATH with an unknown engine: one line, exit 2
    return value


def check_engine_timeout(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 86400:
        raise UsageError(f"--engine-timeout must be a number of seconds in (0, 86400] (got {value})")
    return float(value)
