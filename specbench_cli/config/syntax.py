"""The run options' words, ceilings and value syntax: budgets (`10`, `auto`, `adaptive`),
temperature lists, comma-separated lists and `-o METHOD.KEY=VALUE`. Needs no model, no torch and
no other part of the config."""

from __future__ import annotations

from typing import Any, List, Optional, Union

from specbench_cli.errors import UsageError
from specbench_cli.names import AR, MAX_BUDGET  # noqa: F401 (the run options' words)
from specbench_cli.options import Bound

AUTO = "auto"
ADAPTIVE = "adaptive"
DEFAULT_BUDGET = 10
# Ceilings that hold before the model (and its context length) is known: they keep planning and
# memory bounded whatever is typed; the model's context is checked once it is read (run/limits.py).
MAX_NEW_TOKENS = 1_000_000          # per turn
MAX_REPEATS = 10_000
MAX_THREADS = 4096
MAX_BATCH = 256                     # sequences decoded together (the KV cache's memory is checked too: run/limits.py)
DEFAULT_CALIBRATION_QUESTIONS = 6   # one per mini category: acceptance differs by kind of text
CALIBRATION_TOKENS = 32             # new tokens per calibration question (first turn only)

# Each bound declared once, as a `Bound` (options.py): it checks a value and words the refusal.
BUDGET = Bound(1, MAX_BUDGET)
NEW_TOKENS = Bound(1, MAX_NEW_TOKENS)
REPEATS = Bound(1, MAX_REPEATS)
THREADS = Bound(1, MAX_THREADS)
BATCH = Bound(1, MAX_BATCH)
TEMPERATURE = Bound(0, finite=True)
SEED = Bound(-(1 << 63), (1 << 64) - 1)  # what torch.manual_seed accepts
Budget = Union[int, str]            # a number of tokens, "auto" or "adaptive"
Temperature = Union[float, List[float]]  # one temperature, or a sweep inside one run (--temperature 0,0.7,1)


def parse_bc(value: Any, flag: str = "--block-complexity") -> Budget:
    """'auto', 'adaptive' or a whole number >= 1 (as int); UsageError otherwise."""
    if isinstance(value, str) and value.strip().lower() in (AUTO, ADAPTIVE):
        return value.strip().lower()
    try:
        bc = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{flag} must be a whole number, 'auto' or 'adaptive' (got '{value}')") from None
    return BUDGET.check(bc, flag)


def parse_candidates(values: Any) -> list[int]:
    """Sorted distinct budgets from a list (or a comma-separated string) of whole numbers >= 1."""
    items = values.split(",") if isinstance(values, str) else list(values)
    out = set()
    for v in items:
        b = parse_bc(v, "--auto-candidates")
        if not isinstance(b, int):
            raise UsageError(f"--auto-candidates takes numbers, not '{b}'")
        out.add(b)
    if not out:
        raise UsageError("--auto-candidates needs at least one budget")
    return sorted(out)


def split_list(values: Optional[List[str]]) -> Optional[list[str]]:
    """Repeated and comma-separated CLI values as one list; None when nothing is left."""
    if not values:
        return None
    items = [v.strip() for raw in values for v in raw.split(",") if v.strip()]
    return items or None


def parse_method_options(values: Optional[List[str]]) -> dict[str, dict[str, str]]:
    """['pld.max_ngram=4', ...] -> {'pld': {'max_ngram': '4'}}."""
    opts: dict[str, dict[str, str]] = {}
    for raw in values or []:
        if "=" not in raw or "." not in raw.split("=", 1)[0]:
            raise UsageError(f"--option expects METHOD.KEY=VALUE, got '{raw}'")
        lhs, value = raw.split("=", 1)
        method, key = lhs.rsplit(".", 1)  # the last dot: engine methods have dots (llama.cpp:draft.n_max)
        if not value.strip():
            raise UsageError(f"--option {raw}: no value after '=' (METHOD.KEY=VALUE)")
        given = opts.setdefault(method.strip(), {})
        if key.strip() in given:  # the last one silently won: say which of two values is meant
            raise UsageError(f"--option {method.strip()}.{key.strip()} given twice ({given[key.strip()]} and "
                             f"{value.strip()}); give it once")
        given[key.strip()] = value.strip()
    return opts


def one_temperature(value: Any) -> float:
    """A finite number >= 0; UsageError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TEMPERATURE.refusal(value, "--temperature")
    return TEMPERATURE.check(value, "--temperature")


def parse_temperatures(value: Any) -> Temperature:
    """'0.7' -> 0.7; '0,0.7,1' -> [0.0, 0.7, 1.0] (a sweep inside one run); UsageError for an
    item that is not a finite number >= 0, an empty item or a value given twice."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return one_temperature(float(value))
    items = [v.strip() for v in str(value).split(",")]
    if any(not v for v in items):
        raise UsageError(f"--temperature {value}: an empty item (comma-separated numbers >= 0, e.g. 0,0.7,1)")
    temps = []
    for item in items:
        try:
            t = float(item)
        except ValueError:
            raise TEMPERATURE.refusal(item, "--temperature") from None
        t = one_temperature(t)
        if t in temps:
            raise UsageError(f"--temperature {value}: {item} is given twice; give each temperature once")
        temps.append(t)
    return temps[0] if len(temps) == 1 else temps
