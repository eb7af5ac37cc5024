"""The arrival trace of a load point: which requests are sent, in which order and (open loop) when.

A trace is built once per point from the run's questions (their first turns, templated into
prompt token ids exactly as `specbench run` templates them, each with the run's cap lowered
where the context is short) and written to `DIR/trace/<point>.jsonl`; every method of the point
replays that file, and a resumed or re-run point reads it back instead of drawing again.

- Order: the questions shuffled with the run's seed (the same order at every point), cycled
  (each pass shuffled again) when a point asks for more requests than there are questions.
- Closed loop (`concurrency`): `send_s` is None; a request is sent when one ends.
- Open loop (`rate`): inter-arrival gaps are drawn from a gamma distribution of shape
  `burstiness` and scale 1 / (rate x burstiness) (mean 1 / rate; burstiness 1 is a Poisson
  process, below 1 burstier, above 1 more regular), seeded by the run's seed and the rate, the
  first request at 0 s: `vllm bench serve`'s arrivals.
- Warm-up: `warmup` requests with indexes -1, -2, ... drawn from the far end of the order,
  sent before the point's clock starts and never recorded.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import UsageError, check_not_link
from specbench_cli.jsonl import read_objects
from specbench_cli.store.load import LoadPoint, TraceRequest

WARMUP_TOKENS = 16   # a warm-up request's cap (at most the run's): it warms the server, nothing is measured


@dataclass(frozen=True)
class Prompt:
    """One question's first turn, ready to send: what every request made from it carries."""

    question_id: str
    category: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int


def question_order(n: int, count: int, seed: int) -> list[int]:
    """`count` indexes into `n` questions: a seeded shuffle, cycled with a fresh shuffle each pass."""
    if n <= 0:
        return []
    rng = random.Random(f"specbench-load-order|{seed}")
    out: list[int] = []
    while len(out) < count:
        perm = list(range(n))
        rng.shuffle(perm)
        out += perm
    return out[:count]


def arrival_times(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Send times (s) of `count` open-loop requests: the first at 0, then gamma gaps of shape
    `burstiness` and scale 1 / (rate x burstiness), drawn from a generator seeded by `seed` and
    the rate (module doc)."""
    if count <= 0:
        return []
    rng = random.Random(f"specbench-load-arrivals|{seed}|{rate!r}|{burstiness!r}")
    times, t = [0.0], 0.0
    scale = 1.0 / (rate * burstiness)
    for _ in range(count - 1):
        t += rng.gammavariate(burstiness, scale)
        times.append(t)
    return times


def build_trace(point: LoadPoint, prompts: Sequence[Prompt], seed: int) -> list[TraceRequest]:
    """The requests of `point`: warm-up ones first (negative indexes), then `max_requests`
    (module doc). Closed loop leaves `send_s` None."""
    order = question_order(len(prompts), point.max_requests, seed)
    times: list[Optional[float]]
    if point.mode == "rate":
        times = list(arrival_times(point.max_requests, point.level, point.burstiness, seed))
    else:
        times = [None] * point.max_requests
    out: list[TraceRequest] = []
    warm = question_order(len(prompts), point.warmup, seed + 1)
    for k, qi in enumerate(warm):
        p = prompts[qi]
        out.append(TraceRequest(index=-(k + 1), question_id=p.question_id, category=p.category, turn=0,
                                prompt_ids=p.prompt_ids, max_new_tokens=min(WARMUP_TOKENS, p.max_new_tokens),
                                send_s=None))
    for i, (qi, send) in enumerate(zip(order, times)):
        p = prompts[qi]
        out.append(TraceRequest(index=i, question_id=p.question_id, category=p.category, turn=0,
                                prompt_ids=p.prompt_ids, max_new_tokens=p.max_new_tokens,
                                send_s=None if send is None else round(send, 6)))
    return out


def trace_path(run_dir: Path, point: LoadPoint) -> Path:
    return Path(run_dir) / "trace" / f"{point.name}.jsonl"


def write_trace(path: Path, trace: Sequence[TraceRequest]) -> None:
    """The trace as JSON lines, written atomically (a planted link at the name is replaced, never
    written through)."""
    folder = check_not_link(Path(path).parent)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "".join(json.dumps(t.to_json(), allow_nan=False) + "\n" for t in trace))


def _whole(v, lo: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def read_trace(path: Path, vocab_size: Optional[int] = None, point: Optional[LoadPoint] = None) -> list[TraceRequest]:
    """A trace written by `write_trace`, every field checked (a UsageError naming the file and
    line: a trace is replayed as it stands, so an edited one must still be one); with `point`,
    also that it holds that point's requests (closed loop: no send times; open loop: send times
    that never go back)."""
    where = str(path)
    out: list[TraceRequest] = []
    seen: set[int] = set()
    last_send = -math.inf
    for lineno, row in read_objects(Path(path), "trace file"):
        at = f"{where}:{lineno}"
        index, ids, cap, send = row.get("index"), row.get("prompt_ids"), row.get("max_new_tokens"), row.get("send_s")
        if not isinstance(index, int) or isinstance(index, bool) or index in seen:
            raise UsageError(f"{at}: 'index' must be an integer, once per trace")
        seen.add(index)
        if not isinstance(ids, list) or not ids or not all(_whole(t, 0) for t in ids):
            raise UsageError(f"{at}: 'prompt_ids' must be a non-empty list of token ids")
        if vocab_size is not None and max(ids) >= vocab_size:
            raise UsageError(f"{at}: token id {max(ids)} is outside the model's vocabulary ({vocab_size})")
        if not _whole(cap, 1):
            raise UsageError(f"{at}: 'max_new_tokens' must be an integer >= 1")
        if send is not None and (isinstance(send, bool) or not isinstance(send, (int, float))
                                 or not math.isfinite(send) or send < 0):
            raise UsageError(f"{at}: 'send_s' must be null or a number of seconds >= 0")
        if not isinstance(row.get("question_id"), str) or not isinstance(row.get("category"), str) \
                or not _whole(row.get("turn"), 0):
            raise UsageError(f"{at}: 'question_id' and 'category' must be strings and 'turn' an integer >= 0")
        if point is not None and index >= 0:
            if (point.mode == "rate") != (send is not None):
                raise UsageError(f"{at}: a {'rate' if point.mode == 'rate' else 'concurrency'} point's request "
                                 f"{'needs' if point.mode == 'rate' else 'takes no'} 'send_s'")
            if send is not None:
                if send < last_send:
                    raise UsageError(f"{at}: 'send_s' goes back in time ({send} after {last_send})")
                last_send = send
        out.append(TraceRequest(index=index, question_id=row["question_id"], category=row["category"],
                                turn=row["turn"], prompt_ids=tuple(ids), max_new_tokens=cap,
                                send_s=None if send is None else float(send)))
    warm = sorted((t for t in out if t.index < 0), key=lambda t: -t.index)
    measured = sorted((t for t in out if t.index >= 0), key=lambda t: t.index)
    if [t.index for t in measured] != list(range(len(measured))):
        raise UsageError(f"{where}: the request indexes must be 0, 1, 2, ... (warm-up ones -1, -2, ...)")
    return warm + measured
