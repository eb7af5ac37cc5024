"""The engines study's tables, from the run folders alone (reproduce.sh writes them):

    python analyze.py OUT        -> OUT/engines.md (and prints it)

1. Per run and method, separately for the 18 Spec-Bench questions and the 6 `refine` questions:
   #MAT, tok/s, speedup over the AR of the same target or engine (paired per question), =AR.
2. Each target's or engine's AR against this machine's bandwidth floor for its weight bytes:
   floor = weight bytes / read bandwidth (the bandwidth measured here, with the runs' threads,
   by specbench's roofline: a float32 buffer as large as the weights read by torch's sum and by the
   native library's streaming read, the faster, best of 5, as `specbench cost` measures it).
3. specbench's own overhead as a share of each engine's step: on a target (hf, llama.cpp) the
   loop's work outside the target's forward and the drafter (verdicts, cache commit, the rest of
   the step) over the whole step, the drafter's share beside it; for an engine's own speculation, the request's round trip minus the engine's own
   prompt and generation times (llama.cpp's `timings`), over the round trip (vLLM reports no
   per-request times: not measured)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from specbench_cli.atomic import atomic_write  # replaces a link at the name, never writes through it

SUITES = {"spec_bench": "18 Spec-Bench questions", "refine": "6 refine questions (both turns)"}
RUNS = {"hf": "hf target, float32", "hf-lean": "hf target, float32, the lean forward (torch kernels)",
        "lc-f32": "llama.cpp target, float32 GGUF",
        "lc-q41": "llama.cpp target, Q4_1 GGUF", "native-q41": "llama.cpp's own, Q4_1 GGUF",
        "native-f32": "llama.cpp's own, float32 GGUF", "vllm": "vLLM (CPU build), float32",
        "vllm-heads": "vLLM (CPU build), float32, trained drafters",
        "heads-chain": "hf target, float32, EAGLE-3 drafting a chain"}


def run_dir(out: Path, name: str) -> Path | None:
    found = sorted(p for p in (out / name).glob("2*") if p.is_dir()) if (out / name).is_dir() else []
    return found[-1] if found else None


def rows_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines() if line.strip()]


def fmt(v: float, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def table(headers: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in body])


def speed_tables(out: Path) -> str:
    from specbench_cli.report import metrics

    parts = []
    for suite, title in SUITES.items():
        body = []
        for name, what in RUNS.items():
            folder = run_dir(out, name)
            if folder is None:
                continue
            rows = [r for r in rows_of(folder) if r.get("task") == suite]
            refine = run_dir(out, f"refine-{name}")
            if refine is not None:
                rows += [r for r in rows_of(refine) if r.get("task") == suite]
            if not rows:
                continue
            s = metrics.summarize(rows, by=["method"], overall=False)
            for rec in s.to_dict("records"):
                where = what if ":" in rec["method"] or not name.startswith("vllm") else f"hf target, float32 (the {name} run)"
                slower = " (slower than its AR)" if rec["speedup"] < 1 and not metrics.is_baseline_label(rec["method"]) else ""
                agree = f"{rec['ar_agreement']:.2f}" if rec["ar_compared"] else "–"
                body.append([where, rec["method"], fmt(rec["mat"]), fmt(rec["tokens_per_s"], 1),
                             fmt(rec["speedup"]) + slower, agree, str(rec["n_errors"])])
        parts.append(f"### {title}\n\n" + table(["target / engine", "method", "#MAT", "tok/s", "speedup", "=AR",
                                                  "errors"], body))
    return "\n\n".join(parts)


def weight_bytes_f32() -> tuple[int, int]:
    """(bytes of the float32 matrices one forward reads, their element count) of the embedded model."""
    from safetensors import safe_open

    from specbench_cli.models.load import converted_gguf_dir, locate_alias

    folder = converted_gguf_dir(str(locate_alias("smollm2-135m")))
    n = 0
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                if k.endswith(".weight") and "norm" not in k:
                    shape = st.get_slice(k).get_shape()
                    n += int(math.prod(shape))
    return 4 * n, n


def weight_bytes_gguf(path: Path) -> int:
    """Bytes of a GGUF's 2-D tensors (the matrices a forward reads), as stored."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return sum(int(t.n_bytes) for t in reader.tensors if len([d for d in t.shape if d > 1]) >= 2)


def ar_ms_per_token(folder: Path, method: str) -> float:
    """Decode ms per generated token of `method`'s rows (prefill excluded where recorded)."""
    rows = [r for r in rows_of(folder) if r["method"] == method and r["status"] == "ok" and r["new_tokens"] > 1]
    decode = sum(r["wall_time"] - (r.get("prefill_time") or 0.0) for r in rows)
    tokens = sum(r["new_tokens"] - 1 for r in rows)
    return 1000 * decode / tokens if tokens else float("nan")


def floor_table(out: Path, threads: int = 2) -> str:
    import torch

    from specbench_cli.models.load import locate_alias
    from specbench_cli.run.auto.roofline import read_bandwidth
    from specbench_cli.locate import cache_root
    from specbench_cli.targets.hf.forward import native

    torch.set_num_threads(threads)
    f32_bytes, _ = weight_bytes_f32()
    q41_bytes = weight_bytes_gguf(Path(locate_alias("smollm2-135m")))
    lib, _why = native.load(cache_root() / "native")  # None without a C compiler: torch's sum alone
    bw = read_bandwidth(f32_bytes, native=lib)
    body = []
    for name, method, nbytes in (("hf", "ar", f32_bytes), ("lc-f32", "ar", f32_bytes), ("lc-q41", "ar", q41_bytes),
                                 ("native-q41", "llama.cpp:ar", q41_bytes), ("native-f32", "llama.cpp:ar", f32_bytes),
                                 ("vllm", "vllm:ar", f32_bytes)):
        folder = run_dir(out, name)
        if folder is None:
            continue
        ms = ar_ms_per_token(folder, method)
        floor = 1000 * nbytes / (bw * 1e9)
        body.append([RUNS[name], method, f"{nbytes / 1e6:.0f}", fmt(ms, 1), fmt(floor, 1), fmt(ms / floor, 1)])
    how = "the faster of torch's sum and the native library's streaming read" if lib else "torch's sum"
    return (f"Read bandwidth measured now: **{bw:.1f} GB/s** ({threads} threads, a {f32_bytes / 1e6:.0f} MB float32 "
            f"buffer, {how}, best of 5; `specbench cost` uses the same floor).\n\n" + table(["target / engine", "AR", "weight MB", "ms per token", "floor ms",
                                             "x floor"], body))


def overhead_table(out: Path) -> str:
    body = []
    for name in ("hf", "lc-f32", "lc-q41"):
        folder = run_dir(out, name)
        if folder is None:
            continue
        by: dict[str, list[float]] = {}
        for r in rows_of(folder):
            if r["status"] != "ok" or not r.get("step_forward_ms"):
                continue
            t = by.setdefault(r["method"], [0.0, 0.0, 0.0])
            t[0] += sum(r["step_forward_ms"])
            t[1] += sum(r.get("step_propose_ms") or []) + sum(r.get("step_observe_ms") or [])
            t[2] += 1000 * (r["wall_time"] - (r.get("prefill_time") or 0.0))
        for method, (fwd, drafter, step) in by.items():
            loop = step - fwd - drafter
            body.append([RUNS[name], method, "the loop: verdicts, cache commit, bookkeeping (the drafter: "
                         f"{fmt(100 * drafter / step, 1)} %)", fmt(100 * loop / step, 1) + " %"])
    for name in ("native-q41", "native-f32"):
        folder = run_dir(out, name)
        if folder is None:
            continue
        by = {}
        for r in rows_of(folder):
            t = (r.get("method_stats") or {}).get("timings") or {}
            if r["status"] != "ok" or "predicted_ms" not in t:
                continue
            acc = by.setdefault(r["method"], [0.0, 0.0])
            acc[0] += (t.get("prompt_ms") or 0.0) + t["predicted_ms"]
            acc[1] += 1000 * r["wall_time"]
        for method, (engine, wall) in by.items():
            body.append([RUNS[name], method, "round trip minus llama.cpp's own times", fmt(100 * (1 - engine / wall), 1)
                         + " %"])
    return table(["target / engine", "method", "what", "specbench's share"], body)


def main(out: Path) -> None:
    text = ["# Engines study: the tables", "", "## Speed, #MAT and =AR", "", speed_tables(out), "",
            "## AR against the bandwidth floor", "", floor_table(out), "",
            "## specbench's own overhead per step", "", overhead_table(out), ""]
    atomic_write(out / "engines.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/engines"))
