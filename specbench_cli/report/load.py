"""Load runs read back: the run folder (store/load.py's layout), each request's latencies, each load
point's throughput, goodput, percentiles, acceptance, losslessness and speedup over its
baseline, where speculation stops paying, and the draft length per concurrency
(docs/load-report.md has every formula).

Everything here reads the run folder alone: the manifest (points, methods, their baselines, the
SLO) and the request records. A point or method that has not finished (no `.done` marker) is
read with what it holds and named in the warnings; a damaged line is skipped with a warning.

Units: a *request* is one RequestRecord; it is *ok* when it has no error and both its send and
end times. A *pair* is (point, request index) of a method and of its baseline label, both ok.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import MAX_JSON_DEPTH, read_json_object, too_deep
from specbench_cli.names import baseline_of, engine_of, is_baseline
from specbench_cli.store.load import RECORD_KIND, RequestRecord

MANIFEST = "manifest.json"
KIND = "load"
OWN_TARGET = "specbench"      # the target of methods specbench decodes itself (its own loop)
PERCENTILES = (50, 90, 99)
RESAMPLES = 10_000            # bootstrap resamples of the paired requests (the gate's default)
CONFIDENCE = 0.95
SEED = 0
NAMED_DAMAGE = 5              # damaged lines named one by one per file; the rest are counted
POINT_NAME = re.compile(r"^(?P<mode>[cr])(?P<level>[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?)"
                        r"(?:-bc(?P<bc>[0-9]+|adaptive))?$")
ADAPTIVE = "adaptive"


# ----------------------------------------------------------------------------- reading


def is_load_run(path: str | Path) -> bool:
    """Whether `path` is a load run's folder (its manifest says kind "load"); False for anything
    unreadable, so that the ordinary reader gives its own error."""
    manifest = Path(path) / MANIFEST
    try:
        if not manifest.is_file():
            return False
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == KIND


@dataclass
class LoadRun:
    """One load run folder: its manifest, every request record, and what is unfinished."""

    path: Path
    manifest: dict
    records: list[RequestRecord]
    finished: set[tuple[str, str]] = field(default_factory=set)   # (point, method label) with .done
    warnings: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def slo(self) -> Optional[dict]:
        """{"ttft_ms", "tpot_ms", "e2el_ms"}: the SLO thresholds given (None: no SLO)."""
        slo = self.manifest.get("slo")
        if not isinstance(slo, dict):
            return None
        given = {k: float(v) for k, v in slo.items() if k in SLO_KEYS and _number(v)}
        return given or None

    @property
    def methods(self) -> list[str]:
        """The manifest's method labels, then any other label the records hold (in their order)."""
        listed = [str(m) for m in self.manifest.get("methods") or [] if isinstance(m, str)]
        return list(dict.fromkeys(listed + [r.method for r in self.records]))

    def baseline(self, method: str) -> str:
        """The label `method` is paired with ("" for a baseline): the manifest's `baselines`, else
        the records' `baseline`, else the names' rule (`ENGINE:ar`, `ar`)."""
        given = self.manifest.get("baselines")
        if isinstance(given, dict) and isinstance(given.get(method), str):
            return given[method]
        for record in self.records:
            if record.method == method and record.baseline:
                return record.baseline
        return "" if is_baseline(method) else baseline_of(method)

    def points(self) -> list["PointInfo"]:
        """Every point the manifest lists or a record names, in table order (`PointInfo.order`)."""
        found: dict[str, PointInfo] = {}
        for doc in self.manifest.get("points") or []:
            if isinstance(doc, dict):
                info = PointInfo.from_manifest(doc)
                if info is not None:
                    found.setdefault(info.name, info)
        for record in self.records:
            if record.point not in found:
                info = PointInfo.from_name(record.point)
                if info is not None:
                    found[info.name] = info
        return sorted(found.values(), key=PointInfo.order)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")


@dataclass(frozen=True)
class PointInfo:
    """A load point as the reports group it: its name, mode, level and block complexity (an int,
    "adaptive", or None: the run's)."""

    name: str
    mode: str                # "concurrency" | "rate"
    level: float
    block_complexity: object = None

    @property
    def base(self) -> str:
        """The name without its `-bc<K>` part."""
        return self.name.split("-bc", 1)[0]

    def order(self) -> tuple:
        bc = self.block_complexity
        return (self.mode != "concurrency", self.level, bc is not None,
                bc if isinstance(bc, int) else math.inf, self.name)

    @classmethod
    def from_name(cls, name: str) -> Optional["PointInfo"]:
        found = POINT_NAME.match(str(name))
        if not found:
            return None
        bc = found.group("bc")
        return cls(str(name), "concurrency" if found.group("mode") == "c" else "rate", float(found.group("level")),
                   None if bc is None else (ADAPTIVE if bc == ADAPTIVE else int(bc)))

    @classmethod
    def from_manifest(cls, doc: dict) -> Optional["PointInfo"]:
        """From the manifest's point (LoadPoint's fields and its name); the name's parts fill what
        the fields lack."""
        parsed = cls.from_name(doc.get("name", ""))
        if parsed is None and not isinstance(doc.get("name"), str):
            return None
        mode = doc.get("mode") if doc.get("mode") in ("concurrency", "rate") else (parsed.mode if parsed else None)
        level = doc.get("level") if _number(doc.get("level")) else (parsed.level if parsed else None)
        if mode is None or level is None:
            return None
        bc = doc.get("block_complexity")
        if not (isinstance(bc, int) and not isinstance(bc, bool)):
            bc = parsed.block_complexity if parsed else None
        return cls(str(doc["name"]), mode, float(level), bc)


def load_run(path: str | Path) -> LoadRun:
    """Read a load run folder. A missing or broken manifest is a UsageError; a damaged record line
    is skipped with a warning; a (point, method) without `.done` is read as it is and named."""
    folder = Path(path)
    if not folder.is_dir():
        raise UsageError(f"run folder not found: {folder}")
    manifest = read_json_object(folder / MANIFEST, f"missing {MANIFEST} in {folder}")
    if manifest.get("kind") != KIND:
        raise UsageError(f"{folder}: not a load run (its manifest's kind is {manifest.get('kind')!r})")
    run = LoadRun(folder, manifest, [])
    seen: set[tuple[str, str, int]] = set()
    root = folder / "load"
    point_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []
    for point_dir in point_dirs:
        for path in sorted(point_dir.glob("*.jsonl")):
            if path.is_symlink() or not path.is_file():
                run.warnings.append(f"{path}: not a plain file; skipped")
                continue
            records = _read_records(path, point_dir.name, run.warnings)
            for record in records:
                if record.index < 0:  # a warm-up request: served, never measured
                    continue
                key = (record.point, record.method, record.index)
                if key in seen:
                    run.warnings.append(f"{path}: request {record.index} of {record.method} at {record.point} "
                                        f"recorded twice; the first kept")
                    continue
                seen.add(key)
                run.records.append(record)
            labels = {r.method for r in records}
            if path.with_suffix(".done").is_file():
                run.finished |= {(point_dir.name, label) for label in labels}
            elif labels:
                run.warnings.append(f"{point_dir.name} / {', '.join(sorted(labels))}: unfinished (no .done); "
                                    f"reported with the {len(records)} request(s) recorded")
    listed = {p.get("name") for p in manifest.get("points") or [] if isinstance(p, dict)}
    recorded = {r.point for r in run.records}
    missing = [str(name) for name in listed if isinstance(name, str) and name not in recorded]
    if missing:
        run.warnings.append(f"point(s) with no request recorded yet: {', '.join(sorted(missing))}")
    return run


def _read_records(path: Path, point: str, warnings: list[str]) -> list[RequestRecord]:
    """The records of one file; damaged lines skipped (named, up to NAMED_DAMAGE per file)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        warnings.append(f"{path}: cannot read ({exc.strerror or exc}); skipped")
        return []
    records, damaged = [], 0
    chunks = data.split(b"\n")
    for lineno, chunk in enumerate(chunks, 1):
        if not chunk.strip():
            continue
        why = None
        try:
            text = chunk.decode("utf-8")
            doc = None if too_deep(text) else json.loads(text)
            if doc is None:
                why = f"nested deeper than {MAX_JSON_DEPTH} levels"
            elif not isinstance(doc, dict):
                why = "not a JSON object"
            elif doc.get("kind", RECORD_KIND) != RECORD_KIND:
                why = f"not a request record (kind {doc.get('kind')!r})"
            else:
                record = RequestRecord.from_json(doc)
                record.point = record.point or point
                why = record_problem(record)
                if why is None:
                    records.append(record)
        except (UnicodeDecodeError, ValueError, RecursionError, TypeError) as exc:
            why = f"not valid JSON ({type(exc).__name__})"
            if lineno == len(chunks):
                warnings.append(f"{path}:{lineno}: skipped a truncated final line (crash mid-write?)")
                continue
        if why is not None:
            damaged += 1
            if damaged <= NAMED_DAMAGE:
                warnings.append(f"{path}:{lineno}: {why}; request skipped")
    if damaged > NAMED_DAMAGE:
        warnings.append(f"{path}: {damaged - NAMED_DAMAGE} more damaged line(s) skipped")
    return records


def _times(value: object) -> bool:
    return value is None or _number(value)


def record_problem(record: RequestRecord) -> Optional[str]:
    """Why a record cannot be read (a wrong type, NaN, a negative count), or None."""
    if not isinstance(record.method, str) or not record.method:
        return "no method label"
    if not isinstance(record.index, int) or isinstance(record.index, bool):
        return "index is not an integer"
    for name in ("send_s", "first_token_s", "end_s"):
        if not _times(getattr(record, name)):
            return f"{name} is not a number"
    for name in ("new_tokens", "prompt_tokens"):
        value = getattr(record, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{name} is not a count"
    for name in ("steps", "drafted", "accepted"):
        value = getattr(record, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            return f"{name} is not a count"
    for name in ("token_times_s", "accept_lengths", "accepted_by_position", "drafted_by_position",
                 "draft_path_lengths", "output_ids"):
        value = getattr(record, name)
        if value is not None and not (isinstance(value, list) and all(_number(v) for v in value)):
            return f"{name} is not a list of numbers"
    return None


# ----------------------------------------------------------------------------- per request


def ok(record: RequestRecord) -> bool:
    """Whether a request completed: no error, and its send and end times are known."""
    return record.error is None and record.send_s is not None and record.end_s is not None


def latency(record: RequestRecord) -> Optional[float]:
    """End-to-end latency in seconds: end - send."""
    return record.end_s - record.send_s if ok(record) else None


def ttft(record: RequestRecord) -> Optional[float]:
    """Time to first token in seconds: first token - send. A request that was not streamed has
    no first-token time of its own: its TTFT is its whole latency (the record says so)."""
    if not ok(record):
        return None
    if not record.streamed or record.first_token_s is None:
        return latency(record)
    return record.first_token_s - record.send_s


def tpot(record: RequestRecord) -> Optional[float]:
    """Time per output token after the first, seconds: (end - first token) / (new tokens - 1);
    None for one token or fewer, or when the request was not streamed."""
    if not ok(record) or not record.streamed or record.first_token_s is None or record.new_tokens < 2:
        return None
    return (record.end_s - record.first_token_s) / (record.new_tokens - 1)


def itls(record: RequestRecord) -> Optional[list[float]]:
    """Inter-token latencies in seconds: the gaps between consecutive arrivals of output tokens.
    Tokens that arrive together (a speculative step's accepted tokens, one chunk) are one arrival,
    as `vllm bench serve` counts one ITL per chunk. None when the request was not streamed."""
    if not ok(record) or not record.streamed or not record.token_times_s:
        return None
    times = sorted(float(t) for t in record.token_times_s)
    return [b - a for a, b in zip(times, times[1:]) if b > a]


def accept_length(record: RequestRecord) -> Optional[float]:
    """The request's mean tokens per verification step (accepted drafts + 1): its accept lengths'
    mean, else 1 + accepted / steps; None where the engine reported neither."""
    lengths = record.accept_lengths
    if lengths:
        return float(np.mean(lengths))
    if record.steps and record.accepted is not None:
        return 1 + record.accepted / record.steps
    return None


def step_tokens(record: RequestRecord) -> Optional[tuple[float, int]]:
    """(tokens added by verification steps, steps) for pooling the acceptance length; None when
    unknown."""
    if record.accept_lengths:
        return float(sum(record.accept_lengths)), len(record.accept_lengths)
    if record.steps and record.accepted is not None:
        return float(record.steps + record.accepted), int(record.steps)
    return None


def position_counts(record: RequestRecord) -> Optional[tuple[dict[int, float], dict[int, float], dict[int, float], int]]:
    """(accepted at k, offered at k given 1..k-1 accepted, marginal numerator at k, steps) for k = 1..;
    None without acceptance data.

    With per-step accept lengths and draft path lengths (`draft_path_lengths`), exactly as the
    main report's p_k: accepted at k = steps with accepted >= k; offered = steps with accepted
    >= k-1 whose path reached position k. Otherwise from the per-position counts: accepted at k
    = `accepted_by_position[k-1]` (or the steps with accept length - 1 >= k); offered at 1 =
    `drafted_by_position[0]`, at k > 1 = min(accepted at k-1, drafted at k): exact when every
    step drafted the same number of positions (engines with a fixed draft length)."""
    lengths = record.accept_lengths
    steps = record.steps if record.steps else (len(lengths) if lengths else 0)
    paths = record.draft_path_lengths
    if lengths and paths is not None and len(paths) == len(lengths):
        acc, reach = np.asarray(lengths, dtype=int) - 1, np.asarray(paths, dtype=int)
        top = int(reach.max(initial=0))
        accepted = {k: float((acc >= k).sum()) for k in range(1, top + 1)}
        offered = {k: float(((acc >= k - 1) & (reach >= k)).sum()) for k in range(1, top + 1)}
        return accepted, offered, accepted, len(lengths)
    by_pos = record.accepted_by_position
    if by_pos is None and lengths:
        deepest = max(lengths) - 1
        by_pos = [sum(1 for a in lengths if a - 1 >= k) for k in range(1, deepest + 1)]
    if by_pos is None or not steps:
        return None
    drafted = record.drafted_by_position
    top = max(len(by_pos), len(drafted or []))
    accepted = {k: float(by_pos[k - 1]) if k <= len(by_pos) else 0.0 for k in range(1, top + 1)}
    offered: dict[int, float] = {}
    for k in range(1, top + 1):
        drafted_k = float(drafted[k - 1]) if drafted is not None and k <= len(drafted) else None
        if k == 1:
            if drafted_k is not None:
                offered[k] = drafted_k
        else:
            prev = accepted[k - 1]
            offered[k] = min(prev, drafted_k) if drafted_k is not None else prev
    return accepted, offered, accepted, int(steps)


def request_frame(run: LoadRun) -> pd.DataFrame:
    """One row per request record with its derived metrics (seconds) and its pairing with the
    same request of its baseline label: `equal` (output ids equal; None when either lacks ids
    or errored) and the baseline's latency and tokens (`base_latency`, `base_tokens`)."""
    by_key = {(r.point, r.method, r.index): r for r in run.records}
    points = {p.name: p for p in run.points()}
    rows = []
    for r in run.records:
        baseline = run.baseline(r.method)
        info = points.get(r.point) or PointInfo(r.point, "concurrency", math.nan)
        base = _pair(by_key, r, baseline, info) if baseline else None
        equal = None
        if base is not None and ok(r) and ok(base) and r.output_ids is not None and base.output_ids is not None:
            equal = list(r.output_ids) == list(base.output_ids)
        gaps = itls(r)
        rows.append({
            "point": r.point, "mode": info.mode, "level": info.level, "bc": info.block_complexity,
            "method": r.method, "baseline": baseline, "target": engine_of(r.method) or OWN_TARGET,
            "index": r.index, "question_id": r.question_id, "category": r.category,
            "ok": ok(r), "error": r.error, "streamed": bool(r.streamed),
            "send_s": r.send_s, "end_s": r.end_s, "new_tokens": r.new_tokens,
            "ttft": ttft(r), "tpot": tpot(r), "itls": gaps, "latency": latency(r),
            "accept_length": accept_length(r), "step_tokens": step_tokens(r), "positions": position_counts(r),
            "equal": equal,
            "base_ok": base is not None and ok(base),
            "base_latency": latency(base) if base is not None else None,
            "base_tokens": base.new_tokens if base is not None and ok(base) else None,
        })
    frame = pd.DataFrame(rows, columns=REQUEST_COLUMNS)
    frame["bc"] = pd.Series([r["bc"] for r in rows], index=frame.index, dtype=object)  # ints stay ints
    return frame


REQUEST_COLUMNS = ["point", "mode", "level", "bc", "method", "baseline", "target", "index", "question_id", "category",
                   "ok", "error", "streamed", "send_s", "end_s", "new_tokens", "ttft", "tpot", "itls", "latency",
                   "accept_length", "step_tokens", "positions", "equal", "base_ok", "base_latency", "base_tokens"]


def _pair(by_key: dict, record: RequestRecord, baseline: str, info: PointInfo) -> Optional[RequestRecord]:
    """The baseline's record of the same request: at the same point and index; when the baseline
    was not run at a block-complexity point (`c4-bc8`), at the point without it (`c4`), provided
    it is the same question."""
    found = by_key.get((record.point, baseline, record.index))
    if found is None and info.base != info.name:
        other = by_key.get((info.base, baseline, record.index))
        if other is not None and other.question_id == record.question_id:
            found = other
    return found


# ----------------------------------------------------------------------------- per point


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (numpy's linear interpolation, as `vllm bench serve`); NaN when empty."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else math.nan


def good(row: dict, slo: dict) -> bool:
    """Whether one ok request meets every SLO given (`vllm bench serve --goodput`): TTFT, TPOT and
    end-to-end latency each at most its threshold (ms). A request of one token has no TPOT and
    meets a TPOT threshold; one that was not streamed has no TPOT and does not."""
    if "ttft_ms" in slo and not (row["ttft"] is not None and 1000 * row["ttft"] <= slo["ttft_ms"]):
        return False
    if "tpot_ms" in slo:
        if row["tpot"] is None:
            if not (row["streamed"] and row["new_tokens"] < 2):
                return False
        elif 1000 * row["tpot"] > slo["tpot_ms"]:
            return False
    if "e2el_ms" in slo and not 1000 * row["latency"] <= slo["e2el_ms"]:
        return False
    return True


def pooled_acceptance(positions: Iterable) -> tuple[dict[int, float], dict[int, float]]:
    """(conditional p_k, marginal m_k) pooled over requests: p_k = sum accepted at k / sum offered
    at k; m_k = sum accepted at k / sum steps (`position_counts`)."""
    acc: dict[int, float] = {}
    off: dict[int, float] = {}
    steps = 0
    for item in positions:
        if item is None:
            continue
        accepted, offered, _, n = item
        steps += n
        for k, v in accepted.items():
            acc[k] = acc.get(k, 0.0) + v
        for k, v in offered.items():
            off[k] = off.get(k, 0.0) + v
    conditional = {k: acc.get(k, 0.0) / off[k] for k in sorted(off) if off[k] > 0}
    marginal = {k: acc[k] / steps for k in sorted(acc)} if steps else {}
    return conditional, marginal


def paired_bootstrap(base_tokens: Sequence[float], base_latency: Sequence[float], tokens: Sequence[float],
                     latency_s: Sequence[float], resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                     seed: int = SEED) -> dict:
    """The two paired speedups of a method over its baseline at one point, with percentile bootstrap
    intervals (requests resampled with replacement, each pair kept together, `resamples` times
    from a generator seeded with `seed`):

    - `speedup`: the paired throughput ratio (sum tokens / sum latency of the method) over (the
      same of the baseline), on the same requests: output tokens per second of request time;
    - `latency_speedup`: the geometric mean over requests of baseline latency / method latency.

    Both are above 1 when speculation is faster. NaN without pairs."""
    b_tok, b_lat = np.asarray(base_tokens, dtype=float), np.asarray(base_latency, dtype=float)
    m_tok, m_lat = np.asarray(tokens, dtype=float), np.asarray(latency_s, dtype=float)
    n = b_tok.size
    out = {"n_paired": int(n)}
    nan = {"speedup": math.nan, "speedup_low": math.nan, "speedup_high": math.nan,
           "latency_speedup": math.nan, "latency_speedup_low": math.nan, "latency_speedup_high": math.nan}
    if n == 0 or b_lat.sum() <= 0 or m_lat.sum() <= 0 or b_tok.sum() <= 0:
        return {**out, **nan}
    log_ratio = np.log(b_lat / m_lat)
    out["speedup"] = float((m_tok.sum() / m_lat.sum()) / (b_tok.sum() / b_lat.sum()))
    out["latency_speedup"] = float(np.exp(log_ratio.mean()))
    rng = np.random.default_rng(seed)
    tp = np.empty(resamples)
    lat = np.empty(resamples)
    chunk = max(1, 2_000_000 // n)  # bounded memory for thousands of requests
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, resamples - start), n))
        with np.errstate(divide="ignore", invalid="ignore"):
            tp[start:start + len(idx)] = (m_tok[idx].sum(1) / m_lat[idx].sum(1)) / (b_tok[idx].sum(1) / b_lat[idx].sum(1))
        lat[start:start + len(idx)] = np.exp(log_ratio[idx].mean(1))
    tail = (1 - confidence) / 2
    out["speedup_low"], out["speedup_high"] = (float(v) for v in np.nanquantile(tp, [tail, 1 - tail]))
    out["latency_speedup_low"], out["latency_speedup_high"] = (float(v) for v in np.quantile(lat, [tail, 1 - tail]))
    return out


def pairs_of(group: pd.DataFrame) -> pd.DataFrame:
    """The requests of a group that pair with an ok baseline request and are ok themselves (both
    latencies > 0)."""
    paired = group[group["ok"] & group["base_ok"].astype(bool)]
    return paired[(paired["latency"] > 0) & (paired["base_latency"] > 0)]


def point_summary(run: LoadRun, resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                  seed: int = SEED, requests: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per (point, method) that recorded a request: the module doc's metrics (percentiles
    and means of TTFT, TPOT, ITL and latency in ms; durations in s), in table order: target,
    method (baselines first), point."""
    frame = request_frame(run) if requests is None else requests
    columns = SUMMARY_COLUMNS
    if frame.empty:
        return pd.DataFrame(columns=columns)
    slo = run.slo
    order = {p.name: i for i, p in enumerate(run.points())}
    methods = run.methods
    records = []
    for (point, method), group in frame.groupby(["point", "method"], sort=False):
        first = group.iloc[0]
        done = group[group["ok"]]
        sends = group["send_s"].dropna()
        ends = group["end_s"].dropna()
        duration = float(ends.max() - sends.min()) if len(sends) and len(ends) else math.nan
        duration = duration if duration > 0 else math.nan
        tokens = int(done["new_tokens"].sum())
        ttfts = [v for v in done["ttft"] if v is not None]
        tpots = [v for v in done["tpot"] if v is not None]
        gaps = [g for row in done["itls"] if row is not None for g in row]
        lats = [v for v in done["latency"] if v is not None]
        row = {
            "target": first["target"], "method": method, "baseline": first["baseline"],
            "speculative": bool(first["baseline"]), "point": point, "mode": first["mode"],
            "level": first["level"], "bc": first["bc"],
            "finished": (point, method) in run.finished,
            "sent": int(len(group)), "completed": int(len(done)), "errors": int((~group["ok"]).sum()),
            "duration_s": duration, "output_tokens": tokens,
            "output_tok_s": tokens / duration if duration == duration else math.nan,
            "requests_s": len(done) / duration if duration == duration else math.nan,
            "streamed": _streamed(done),
        }
        if slo:
            n_good = sum(good(r, slo) for r in done.to_dict("records"))
            row["good"] = int(n_good)
            row["goodput"] = n_good / duration if duration == duration else math.nan
        else:
            row["good"], row["goodput"] = None, math.nan
        for name, values, scale in (("ttft", ttfts, 1000), ("tpot", tpots, 1000), ("itl", gaps, 1000),
                                    ("latency", lats, 1000)):
            for q in PERCENTILES:
                row[f"{name}_p{q}"] = scale * percentile(values, q)
            row[f"{name}_mean"] = scale * float(np.mean(values)) if values else math.nan
        pooled = [v for v in done["step_tokens"] if v is not None]
        steps = sum(n for _, n in pooled)
        row["mean_accept_length"] = sum(t for t, _ in pooled) / steps if steps else math.nan
        row["conditional_acceptance"], row["marginal_acceptance"] = pooled_acceptance(done["positions"])
        compared = [e for e in group["equal"] if e is not None]
        row["equal"], row["compared"] = int(sum(compared)), len(compared)
        row["lossless"] = row["equal"] / len(compared) if compared else math.nan
        if row["speculative"]:
            pairs = pairs_of(group)
            row.update(paired_bootstrap(pairs["base_tokens"], pairs["base_latency"], pairs["new_tokens"],
                                        pairs["latency"], resamples, confidence, seed))
        else:
            row.update(paired_bootstrap([], [], [], []))
            row["n_paired"] = 0
        records.append(row)
    out = pd.DataFrame(records)
    out["bc"] = pd.Series([r["bc"] for r in records], index=out.index, dtype=object)
    for col in columns:
        if col not in out:
            out[col] = None
    rank = {m: i for i, m in enumerate(methods)}
    ordered = sorted(range(len(out)), key=lambda i: (
        str(out.at[i, "target"]), bool(out.at[i, "baseline"]), rank.get(out.at[i, "method"], len(rank)),
        str(out.at[i, "method"]), order.get(out.at[i, "point"], len(order))))
    return out.iloc[ordered].reset_index(drop=True)[columns]


SUMMARY_COLUMNS = [
    "target", "method", "baseline", "speculative", "point", "mode", "level", "bc", "finished", "sent", "completed",
    "errors", "duration_s", "output_tokens", "output_tok_s", "requests_s", "good", "goodput", "streamed",
    *[f"{m}_{s}" for m in ("ttft", "tpot", "itl", "latency") for s in (*(f"p{q}" for q in PERCENTILES), "mean")],
    "mean_accept_length", "conditional_acceptance", "marginal_acceptance", "equal", "compared", "lossless",
    "n_paired", "speedup", "speedup_low", "speedup_high", "latency_speedup", "latency_speedup_low",
    "latency_speedup_high",
]


def _streamed(done: pd.DataFrame) -> str:
    """"yes" (every ok request streamed), "no" (none: TTFT is the whole latency, TPOT and ITL
    unknown), "part", or "" without ok requests."""
    if done.empty:
        return ""
    flags = set(done["streamed"].astype(bool))
    return "yes" if flags == {True} else ("no" if flags == {False} else "part")


# ----------------------------------------------------------------------------- where it stops paying


def verdict(low: float, high: float) -> str:
    """"pays" (the whole interval above 1), "costs" (below 1), "unclear" (it holds 1), "" (none)."""
    if not (_number(low) and _number(high)):
        return ""
    return "pays" if low > 1 else ("costs" if high < 1 else "unclear")


@dataclass
class Crossover:
    """Where the speedup of one (target, method, BC) along one axis stops paying."""

    target: str
    method: str
    bc: object
    mode: str
    levels: list[float]
    verdicts: list[str]
    points: list[str]
    at: Optional[str]        # the point where it stops paying (None: no crossover)
    level: Optional[float]
    text: str


def crossovers(summary: pd.DataFrame) -> list[Crossover]:
    """Per (target, method, BC) and axis (concurrency, rate): walking up the levels measured, the
    first level whose speedup interval is not wholly above 1 after a level where it was (the
    speedup there falls through 1: its interval holds 1, or below 1: wholly under it)."""
    out = []
    spec = summary[summary["speculative"].astype(bool)]
    for (target, method, mode), group in spec.groupby(["target", "method", "mode"], sort=False):
        for bc, series in group.groupby(group["bc"].map(_bc_key), sort=False):
            series = series.sort_values("level")
            known = [verdict(lo, hi) != "" for lo, hi in zip(series["speedup_low"], series["speedup_high"])]
            series = series[pd.Series(known, index=series.index, dtype=bool)]
            if series.empty:
                continue
            levels = [float(v) for v in series["level"]]
            verdicts = [verdict(lo, hi) for lo, hi in zip(series["speedup_low"], series["speedup_high"])]
            names = list(series["point"])
            at, level, text = _crossing(levels, verdicts, names, list(series["speedup_low"]),
                                        list(series["speedup_high"]), mode)
            out.append(Crossover(target, method, series["bc"].iloc[0], mode, levels, verdicts, names, at, level, text))
    return out


def _bc_key(bc: object) -> str:
    return "" if bc is None or (isinstance(bc, float) and math.isnan(bc)) else str(bc)


def _crossing(levels, verdicts, names, lows, highs, mode) -> tuple[Optional[str], Optional[float], str]:
    unit = "concurrency" if mode == "concurrency" else "request rate"
    first = next((i for i, v in enumerate(verdicts) if v == "pays"), None)
    if first is None:
        if all(v == "costs" for v in verdicts):
            return None, None, f"never pays: slower at every {unit} measured"
        return None, None, f"never pays measurably at the {unit} levels measured"
    stop = next((i for i in range(first + 1, len(verdicts)) if verdicts[i] != "pays"), None)
    if stop is None:
        if first == 0:
            return None, None, f"pays at every {unit} measured"
        return None, None, f"pays from {names[first]} on (not measurably below it)"
    how = ("falls below 1" if verdicts[stop] == "costs" else "falls through 1")
    text = (f"stops paying at {names[stop]}: speedup {how} (interval [{lows[stop]:.2f}, {highs[stop]:.2f}]; "
            f"pays at {names[stop - 1]})")
    again = next((i for i in range(stop + 1, len(verdicts)) if verdicts[i] == "pays"), None)
    if again is not None:
        text += f"; pays again at {names[again]}"
    return names[stop], levels[stop], text


# ----------------------------------------------------------------------------- draft length per concurrency


def objective_name(summary: pd.DataFrame, slo: Optional[dict]) -> str:
    """"goodput" with an SLO, else "output_tok_s"."""
    return "goodput" if slo else "output_tok_s"


def schedules(summary: pd.DataFrame, slo: Optional[dict]) -> dict:
    """Per speculative (target, method) swept over block complexity at concurrency levels: the BC
    with the best objective (goodput under the SLO, else output tok/s; ties go to the smaller BC)
    at each level, as {method: {...}} (docs/load-report.md has the file's format)."""
    objective = objective_name(summary, slo)
    spec = summary[summary["speculative"].astype(bool) & (summary["mode"] == "concurrency")]
    spec = spec[spec["bc"].map(lambda b: isinstance(b, (int, np.integer)) and not isinstance(b, bool)).astype(bool)]
    out = {}
    for method, group in spec.groupby("method", sort=False):
        if group["bc"].nunique() < 2:
            continue
        per_level, measured = {}, {}
        for level, at in group.groupby("level", sort=True):
            values = {int(b): float(v) for b, v in zip(at["bc"], at[objective]) if _number(v)}
            if not values:
                continue
            best = max(values.values())
            chosen = min(b for b, v in values.items() if v == best)
            per_level[int(level)] = chosen
            measured[str(int(level))] = {str(b): values[b] for b in sorted(values)}
        if not per_level:
            continue
        out[method] = {
            "target": str(group["target"].iloc[0]),
            "objective": objective,
            "block_complexity_per_concurrency": {str(c): k for c, k in per_level.items()},
            "num_speculative_tokens": max(per_level.values()) - 1,
            "num_speculative_tokens_per_batch_size": vllm_ranges(per_level),
            "measured": measured,
        }
    return out


def vllm_ranges(per_level: dict[int, int]) -> list[list[int]]:
    """{concurrency: BC} -> vLLM's `num_speculative_tokens_per_batch_size` list of [first batch size,
    last batch size, K]: each measured level's range runs to the next level - 1, the last ends at
    the largest level measured, K = BC - 1 (draft tokens: a block complexity counts the root
    token too), adjacent equal K merged."""
    levels = sorted(per_level)
    ranges: list[list[int]] = []
    for i, start in enumerate(levels):
        end = levels[i + 1] - 1 if i + 1 < len(levels) else start
        k = max(per_level[start] - 1, 0)
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, k])
    return ranges


def adaptive_rows(summary: pd.DataFrame, plan: dict) -> list[dict]:
    """Per method with a schedule and `-bcadaptive` points: at each concurrency, the scheduled BC's
    objective and speedup against the adaptive budget's."""
    rows = []
    spec = summary[summary["speculative"].astype(bool) & (summary["mode"] == "concurrency")]
    for method, sched in plan.items():
        objective = sched["objective"]
        mine = spec[spec["method"] == method]
        for _, adaptive in mine[mine["bc"] == ADAPTIVE].sort_values("level").iterrows():
            level = str(int(adaptive["level"]))
            chosen = sched["block_complexity_per_concurrency"].get(level)
            if chosen is None:
                continue
            fixed = mine[(mine["level"] == adaptive["level"]) & (mine["bc"] == chosen)]
            if fixed.empty:
                continue
            fixed = fixed.iloc[0]
            ratio = adaptive[objective] / fixed[objective] if _number(fixed[objective]) and fixed[objective] else math.nan
            rows.append({"target": sched["target"], "method": method, "level": adaptive["level"],
                         "point": adaptive["point"], "scheduled_bc": chosen, "objective": objective,
                         "scheduled": fixed[objective], "adaptive": adaptive[objective], "ratio": ratio,
                         "scheduled_speedup": fixed["speedup"], "adaptive_speedup": adaptive["speedup"],
                         "adaptive_speedup_low": adaptive["speedup_low"],
                         "adaptive_speedup_high": adaptive["speedup_high"]})
    return rows
