"""Synthetic load run folders (store/load.py's layout) with known values, for the load reports.

`request(...)` builds one RequestRecord as JSON with times chosen by the test; `write_load_run`
writes the manifest, the traces, the records and the `.done` markers. `simple_run` is a
ready-made run: `ar` and `pld` at concurrency 1, 2 and 4, whose every number can be worked out
by hand (see its docstring).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from specbench_cli.store.load import LoadPoint, RequestRecord, TraceRequest


def request(method: str, point: str, index: int, *, send: float = 0.0, ttft: float = 0.1,
            latency: float = 1.0, tokens: int = 11, baseline: str = "", output_ids: Optional[list[int]] = None,
            token_times: Optional[list[float]] = None, streamed: bool = True, error: Optional[str] = None,
            accept_lengths: Optional[list[int]] = None, question_id: Optional[str] = None, **extra) -> dict:
    """One record: sent at `send`, first token `ttft` later, ended `latency` after sending, `tokens`
    output tokens evenly spaced from the first token to the end (unless `token_times` is given)."""
    first, end = send + ttft, send + latency
    if token_times is None and streamed and tokens > 0:
        step = (end - first) / (tokens - 1) if tokens > 1 else 0.0
        token_times = [first + i * step for i in range(tokens)]
    ids = output_ids if output_ids is not None else [1000 + index * 7 + i for i in range(tokens)]
    record = RequestRecord(
        point=point, method=method, baseline=baseline, speculative=bool(baseline), index=index,
        question_id=question_id or f"q{index}", category="qa", send_s=send,
        first_token_s=first if streamed else end, end_s=end,
        token_times_s=token_times if streamed else None, streamed=streamed, prompt_tokens=20,
        new_tokens=tokens, output_ids=None if error else ids, error=error,
        accept_lengths=accept_lengths, steps=len(accept_lengths) if accept_lengths else None,
        accepted=sum(a - 1 for a in accept_lengths) if accept_lengths else None,
        acceptance_source="loop" if accept_lengths else "", **extra)
    doc = record.to_json()
    if error:
        doc["end_s"] = end
    return doc


def point(mode: str, level: float, bc=None, max_requests: int = 8) -> dict:
    """A manifest point (LoadPoint's fields and its name); `bc` "adaptive" names a `-bcadaptive` point."""
    p = LoadPoint(mode, level, max_requests, 60.0, block_complexity=bc if isinstance(bc, int) else None)
    doc = {**p.__dict__, "name": p.name + ("-bcadaptive" if bc == "adaptive" else "")}
    return doc


def write_load_run(folder: Path, points: list[dict], records: Iterable[dict], *, methods: Optional[list[str]] = None,
                   baselines: Optional[dict] = None, slo: Optional[dict] = None, unfinished: Iterable = (),
                   extra_lines: Optional[dict] = None) -> Path:
    """Write a load run folder. `unfinished`: (point, method) pairs left without `.done`;
    `extra_lines`: (point, method) -> raw text appended to that file (damage)."""
    records = list(records)
    methods = methods or list(dict.fromkeys(r["method"] for r in records))
    baselines = baselines if baselines is not None else {
        m: next((r["baseline"] for r in records if r["method"] == m), "") for m in methods}
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"kind": "load", "run_id": folder.name,
                "config": {"model": "tiny", "concurrency": [p["level"] for p in points if p["mode"] == "concurrency"],
                           "max_new_tokens": 16, "threads": 2},
                "points": points, "methods": methods, "baselines": baselines, "slo": slo,
                "machine": {"cpu_model": "Test CPU", "cpu_count": 2}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (folder / "trace").mkdir(exist_ok=True)
    by_point: dict[str, list[dict]] = {}
    for r in records:
        by_point.setdefault(r["point"], []).append(r)
    for name, rows in by_point.items():
        seen = sorted({r["index"] for r in rows})
        trace = [TraceRequest(i, f"q{i}", "qa", 0, (1, 2, 3), 16, None).to_json() for i in seen]
        (folder / "trace" / f"{name}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trace))
        for method in dict.fromkeys(r["method"] for r in rows):
            directory = folder / "load" / name
            directory.mkdir(parents=True, exist_ok=True)
            stem = method.replace(":", "_").replace("/", "_")
            text = "".join(json.dumps(r) + "\n" for r in rows if r["method"] == method)
            text += (extra_lines or {}).get((name, method), "")
            (directory / f"{stem}.jsonl").write_text(text)
            if (name, method) not in set(unfinished):
                (directory / f"{stem}.done").write_text("")
    return folder


# speedups of pld over ar at c1, c2, c4 in `simple_run`: pld's latency is ar's / factor
SIMPLE_FACTORS = {"c1": 2.0, "c2": 1.5, "c4": 0.8}


def simple_records(n: int = 6, factors: dict = SIMPLE_FACTORS, jitter: bool = True) -> list[dict]:
    """ar and pld at each point of `factors`, `n` requests each, requests sent one after another:
    ar's request i takes 1 + 0.1 i seconds (1 with `jitter` False), 11 tokens, first token at 0.1 s; pld's takes ar's latency / factor, the same tokens, with accept lengths
    [3, 3, 2, 2] (10 tokens in 4 steps) and draft path lengths of 3 per step. Request 0 of pld at
    every point has other output ids (unequal); the rest are equal."""
    out = []
    for name, factor in factors.items():
        t_ar = t_pld = 0.0
        for i in range(n):
            lat = 1.0 + (0.1 * i if jitter else 0.0)
            out.append(request("ar", name, i, send=t_ar, ttft=0.1, latency=lat, tokens=11))
            t_ar += lat
            ids = [1000 + i * 7 + k for k in range(11)]
            if i == 0:
                ids = [9] + ids[1:]
            pl = lat / factor
            out.append(request("pld", name, i, send=t_pld, ttft=0.1 / factor, latency=pl, tokens=11, baseline="ar",
                               output_ids=ids, accept_lengths=[3, 3, 2, 2], draft_path_lengths=[3, 3, 3, 3]))
            t_pld += pl
    return out


def simple_run(folder: Path, slo: Optional[dict] = None, **kwargs) -> Path:
    return write_load_run(folder, [point("concurrency", c) for c in (1, 2, 4)], simple_records(**kwargs), slo=slo)


def invoke(*args) -> tuple[int, str]:
    """Run report/check/baseline through Typer; (exit code as `specbench` gives it, output)."""
    import typer
    from typer.testing import CliRunner

    from specbench_cli.cli.report import register
    from specbench_cli.errors import SpecBenchError

    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, [str(a) for a in args])
    exc = result.exception
    if isinstance(exc, SpecBenchError):
        return exc.exit_code, f"{result.output}{exc}"
    if exc is not None and not isinstance(exc, SystemExit):
        raise exc
    return result.exit_code, result.output
