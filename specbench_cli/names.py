"""The names every layer shares: the baseline's name (`AR`), how engine methods are named and
which AR each method is compared with, and the largest block complexity (`MAX_BUDGET`).

An engine method is `ENGINE:METHOD` (`llama.cpp:ngram-mod`, `vllm:eagle3`): the engine decodes
the whole answer with its own speculation, specbench only sends the prompt and reads the result.
Its baseline is `ENGINE:ar`, the same engine with speculation off: speedup is paired per question
with it, and `=AR` compares with its tokens. `ENGINE:ar` itself is compared with specbench's `ar`
(the hf target), which reports show as information (engines differ in arithmetic), not as a
losslessness check. Everything else is compared with `ar`. Imports nothing: the config and the
reports read these rules.
"""

from __future__ import annotations

from typing import Iterable, Optional

AR = "ar"          # the baseline: plain autoregressive decoding, one token per forward
SEPARATOR = ":"    # ENGINE:METHOD
# The largest block complexity (tokens per forward) anything accepts, before the model and its
# context length are known (Spec-Bench's largest trees use 64).
MAX_BUDGET = 4096


def engine_of(method: str) -> Optional[str]:
    """'llama.cpp:ngram-mod' -> 'llama.cpp'; None for a method specbench decodes itself."""
    base = str(method).split("@", 1)[0]
    engine, sep, name = base.partition(SEPARATOR)
    return engine if sep and engine and name else None


def engine_ar(engine: str) -> str:
    return f"{engine}{SEPARATOR}{AR}"


def is_baseline(method: str) -> bool:
    """`ar`, or an engine's `ENGINE:ar`: a method whose speedup is 1 by construction."""
    engine = engine_of(method)
    return method == AR or (engine is not None and method == engine_ar(engine))


def baseline_of(method: str) -> str:
    """The AR a method's speedup is paired with: `ENGINE:ar` for engine methods, else `ar`."""
    engine = engine_of(method)
    return engine_ar(engine) if engine is not None else AR


def compared_with(method: str) -> Optional[str]:
    """Whose tokens a method's `ar_match` compares with: `ar` for `ENGINE:ar` (information), the
    baseline for every other method; None for `ar` itself."""
    if method == AR:
        return None
    return AR if is_baseline(method) else baseline_of(method)


def with_baselines(names: Iterable[str]) -> list[str]:
    """`names` with `ENGINE:ar` added before the first method of each engine that lacks it."""
    out: list[str] = []
    for n in names:
        engine = engine_of(n)
        if engine is not None and engine_ar(engine) not in out:
            out.append(engine_ar(engine))
        if n not in out:
            out.append(n)
    return out
