"""What a load run writes, and what a backend must do: the one contract between the load
generator, its backends (HTTP servers, specbench's own loop) and the reports.

Run folder of a load run (`specbench load ... --output-dir DIR`):

    DIR/manifest.json                 kind "load": the run's config, the points, the methods
    DIR/trace/<point>.jsonl           the arrival trace of a point: one TraceRequest per line
    DIR/load/<point>/<method>.jsonl   one RequestRecord per line (method: the instance label,
                                      file-safe; the record holds the label itself)
    DIR/load/<point>/<method>.done    written last: the point is finished for that method

A point's name is `c<N>` (closed loop, N requests in flight) or `r<RATE>` (open loop, RATE
requests per second, e.g. `r0.5`), with `-bc<K>` appended when the run sweeps block complexity.
Reports are built from these files alone (report/load.py); pairing a speculative request with
its baseline's is by (point, request index).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence, Union

RECORD_KIND = "load-request"


@dataclass(frozen=True)
class LoadPoint:
    """One load level. `mode` "concurrency": `level` requests in flight at all times (a new one
    is sent when one ends); "rate": requests sent at the trace's `send_s` times (`level` per
    second on average). `max_requests` and `time_limit_s` bound the point; `warmup` requests
    are sent first and not recorded."""

    mode: str                     # "concurrency" | "rate"
    level: float                  # N in flight, or requests per second
    max_requests: int
    time_limit_s: float
    warmup: int = 0
    burstiness: float = 1.0       # gamma shape of the inter-arrival times (1.0: Poisson)
    seed: int = 0
    block_complexity: Optional[Union[int, str]] = None  # the draft budget this point runs at (a number or
                                                        # 'adaptive'; None: the run's)

    @property
    def name(self) -> str:
        level = f"{int(self.level)}" if self.mode == "concurrency" else f"{self.level:g}"
        base = ("c" if self.mode == "concurrency" else "r") + level
        return base + (f"-bc{self.block_complexity}" if self.block_complexity is not None else "")


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: the same for every method at that point."""

    index: int                    # order of sending, 0-based (warm-up requests are negative)
    question_id: str
    category: str
    turn: int
    prompt_ids: tuple[int, ...]   # the templated prompt, token ids (every backend sends ids)
    max_new_tokens: int
    send_s: Optional[float]       # open loop: seconds after the point starts; closed loop: None

    def to_json(self) -> dict:
        d = asdict(self)
        d["prompt_ids"] = list(self.prompt_ids)
        return d


@dataclass
class RequestRecord:
    """What happened to one request. Times are seconds from the point's start, on one clock
    (`time.perf_counter` of the sending process); None where unknown. `token_times_s`: when
    each output token arrived (streamed), or None when the API gave no stream (`streamed`
    False: then TTFT is the whole latency and ITL unknown; the row says so)."""

    kind: str = RECORD_KIND
    point: str = ""
    method: str = ""              # instance label, e.g. "llama.cpp:ngram-mod", "pld", "synthetic"
    baseline: str = ""            # the label it is paired with ("" for a baseline itself)
    speculative: bool = False
    index: int = 0
    question_id: str = ""
    category: str = ""
    turn: int = 0
    send_s: Optional[float] = None
    first_token_s: Optional[float] = None
    end_s: Optional[float] = None
    token_times_s: Optional[list[float]] = None
    streamed: bool = True
    prompt_tokens: int = 0
    new_tokens: int = 0
    output_ids: Optional[list[int]] = None   # the answer's token ids (for the paired equality check)
    # speculation, where the backend knows it (None: not reported by the engine)
    steps: Optional[int] = None
    drafted: Optional[int] = None
    accepted: Optional[int] = None
    accept_lengths: Optional[list[int]] = None        # per verification step: 1 + accepted draft tokens
    accepted_by_position: Optional[list[int]] = None  # steps whose draft position k+1 was accepted
    drafted_by_position: Optional[list[int]] = None   # steps whose draft had a position k+1
    draft_path_lengths: Optional[list[int]] = None    # per verification step: draft positions on the path the
                                                      # target took (accepted + the refused one; conditional p_k)
    acceptance_source: str = ""   # "loop" | "reply" | "metrics-delta" | "" (none)
    batch_sizes: Optional[list[int]] = None  # own loop: sequences in the batch at each of its steps
    error: Optional[str] = None   # one line; the record is an error row
    log_tail: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "RequestRecord":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


class Backend(Protocol):
    """Serves the requests of a load point for one method. `start` (servers up, models loaded)
    happens before the point's clock starts; `serve` sends the trace's requests at the point's
    load (closed loop: keep `point.level` in flight; open loop: at `send_s`), calls `record`
    once per request as it ends (error rows included: a request never hangs, each has a
    timeout), stops sending at `point.time_limit_s`, and returns when every request sent has
    ended. Warm-up requests (negative index) are served but not recorded. `stop` is idempotent
    and runs on every exit path."""

    label: str

    def start(self) -> None: ...

    def serve(self, point: LoadPoint, trace: Sequence[TraceRequest],
              record: Callable[[RequestRecord], None]) -> None: ...

    def stop(self) -> None: ...
