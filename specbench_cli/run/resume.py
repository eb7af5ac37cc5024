"""`specbench run --resume`: flags that contradict the run's manifest, and `--retry-errors`.

A resumed run takes every setting from its manifest, so a flag given with `--resume` either
repeats the manifest (harmless) or contradicts it: then the run is refused (exit 2) and the
flags are named, because silently ignoring `--bc 30` would add BC-10 rows the user thinks are
BC-30 ones.
"""

from __future__ import annotations

from typing import Any, Callable

from specbench_cli.config import RunConfig
from specbench_cli.errors import UsageError
from specbench_cli.store.runfolder import RunFolder

# `run` parameter -> (RunConfig field, the CLI value as the manifest stores it). Parameters not
# listed (--resume, --no-report, --trust-remote-code, --retry-errors) do not touch the config.
Normalise = Callable[[Any], Any]


def resume_conflicts(given: dict[str, Any], cfg: RunConfig, normalise: dict[str, tuple[str, Normalise]]) -> list[str]:
    """'--flag VALUE (manifest: VALUE)' for each given flag whose value differs from `cfg`.

    given:     parameter name -> value, only for parameters the user actually passed.
    normalise: parameter name -> (config field, function turning the CLI value into the
               stored form, e.g. '--methods pld' -> ['ar', 'pld']).
    """
    found = []
    for name, value in given.items():
        if name not in normalise:
            continue
        field, norm = normalise[name]
        wanted, stored = norm(value), getattr(cfg, field)
        if wanted != stored:
            flag = "--" + name.replace("_", "-")
            shown = flag if isinstance(value, bool) else f"{flag} {_show(wanted)}"  # a switch has no value
            found.append(f"{shown} (manifest: {field}={_show(stored)})" if isinstance(value, bool)
                         else f"{shown} (manifest: {_show(stored)})")
    return found


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def check_resume_flags(given: dict[str, Any], cfg: RunConfig, normalise: dict[str, tuple[str, Normalise]],
                       folder: str) -> None:
    conflicts = resume_conflicts(given, cfg, normalise)
    if conflicts:
        raise UsageError(f"--resume {folder}: {'; '.join(conflicts)} contradict(s) the run's manifest; "
                         f"a resumed run keeps its settings (drop the flag(s), or start a new run)")


def retry_error_rows(store: RunFolder) -> int:
    """Remove error rows so the resumed run makes them again; return how many went.

    Also removed: rows of other methods whose AR row failed (they could not be compared with
    AR, `ar_match` is null) at the same temperature, so the retried AR answer is compared with a
    fresh one. Later turns after a failed turn are error rows themselves ("not run: an earlier
    turn failed")."""
    rows = store.rows()
    failed_ar = {_question(r) for r in rows if r["method"] == "ar" and r["status"] != "ok"}

    def drop(row: dict) -> bool:
        return row["status"] != "ok" or (row["method"] != "ar" and _question(row) in failed_ar)

    return store.drop_rows(drop)


def _question(row: dict) -> tuple:
    """The turn a row answers: (task, question, turn, repeat, temperature)."""
    return (row.get("task"), str(row["question_id"]), row["turn"], row.get("repeat", 0),
            float(row.get("temperature") or 0.0))
