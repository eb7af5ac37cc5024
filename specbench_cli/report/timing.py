"""Where a method's decode time goes, and why a higher #MAT can still be slower (docs/metrics.md,
"Where the time goes").

Per method instance (model, method label, BC, N), pooled over its `ok` rows:

- each part of a decoding step (propose, forward, accept, commit, observe: the rows' `*_time`,
  written by decoding/decoder.py; "other" is the rest of the decode time) in ms per step and as a share
  of the decode wall time (`wall_time - prefill_time`);
- three speedups side by side: *predicted* (the cost model of `--bc auto`, run/auto/bcauto.py, from the
  instance's accepted tokens and tokens per step, its measured drafting and other step costs and
  the device's cost curve t(q) recorded in the run's manifest), *measured* (the report's speedup)
  and *oracle* (every draft accepted up to its deepest node, at the measured step cost).

Everything comes from result files: rows and the manifests' `cost_curve`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import pandas as pd

from specbench_cli.report.metrics import AR_METHOD, OVERALL, is_ar_label, label_suffix, temperature_of
from specbench_cli.report.table import MISSING, ROW_KEY, Column, TableData, row_keys
from specbench_cli.store.rows import PARTS

SHOWN_PARTS = PARTS + ("other",)
PART_HEADERS = {"propose": "Propose", "forward": "Forward", "accept": "Accept", "commit": "Commit",
                "observe": "Observe", "other": "Other"}
TITLE = "Where the time goes: ms per decoding step (share of decode time); predicted, measured and oracle speedup"
FILE_STEM = "time"
TEMPERATURE_TITLE = "#MAT by temperature"
TEMPERATURE_STEM = "temperature"
NOTES = [
    "Parts of a step: propose and observe (the drafter), forward (the target's verify forward), accept (the "
    "verdicts), commit (the cache keeps the accepted path), other (the rest of the decode time: the forward's "
    "inputs, bookkeeping, other sequences' drafting at N > 1). Shares are of the decode time (wall - prefill).",
    "Pred.: the cost model's speedup from this instance's tokens per step, tokens per forward, measured drafting "
    "and other costs, with the forward from the run's cost curve t(q); Meas.: the table's speedup over AR; "
    "Oracle: Meas. x (1 + deepest draft) / #MAT, every draft accepted at the measured step cost (docs/metrics.md).",
]


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _key(row: dict) -> tuple:
    return (row.get("model", ""), row["method_label"], int(row.get("block_complexity") or 0),
            int(row.get("batch_size") or 1))


def _question(row: dict) -> tuple:
    return (row.get("task"), str(row["question_id"]), row.get("turn", 0), row.get("repeat", 0))


def has_split(row: dict) -> bool:
    """Whether a row carries every part of the step split (older rows and CUDA runs without
    --time-steps do not)."""
    return all(_num(row.get(f"{part}_time")) is not None for part in PARTS)


def decode_seconds(row: dict) -> float:
    return max(float(row.get("wall_time") or 0.0) - float(row.get("prefill_time") or 0.0), 0.0)


def oracle_tokens(row: dict) -> Optional[list[int]]:
    """Per step: the tokens it would have added had the target accepted its draft down to the
    deepest acceptable node (1 + `draft_depths`); rows without depths: `budget_used` for chain
    drafters (a chain's length is its budget minus the root), else None."""
    depths = row.get("draft_depths")
    if isinstance(depths, list) and len(depths) == len(row.get("accept_lengths") or []):
        return [1 + int(d) for d in depths]
    if row.get("method") == AR_METHOD:
        return [1] * len(row.get("accept_lengths") or [])
    used = row.get("budget_used")
    if row.get("structure") == "chain" and isinstance(used, list) and len(used) == len(row.get("accept_lengths") or []):
        return [int(q) for q in used]
    return None


# The cost model of `--bc auto` (run/auto/bcauto.py: `monotone`, `Profile`,
# `predicted_tokens_per_s`), restated here because reports sit below the run layer and must not
# import it; tests/report/test_timing.py checks that both give the same numbers.


def monotone(ms: Sequence[float]) -> Callable[[int], float]:
    """t(q) made non-decreasing (t'(q) = min over q' >= q), beyond the measured range the last
    value plus the last slope: bcauto.monotone."""
    env = list(ms)
    for i in range(len(env) - 2, -1, -1):
        env[i] = min(env[i], env[i + 1])
    slope = max(env[-1] - env[-2], 0.0) if len(env) > 1 else env[-1]
    return lambda q: env[q - 1] if q <= len(env) else env[-1] + slope * (q - len(env))


@dataclass
class StepCosts:
    """Steps pooled: tokens added per step (a_i), tokens through the target (q_i), drafting ms
    and the other ms of the decode time but the forward (sums)."""

    accept_lengths: list[int] = field(default_factory=list)
    budget_used: list[int] = field(default_factory=list)
    draft_ms: float = 0.0
    overhead_ms: float = 0.0


def predicted_tokens_per_s(p: StepCosts, t: Callable[[int], float]) -> float:
    """1000 sum(a_i) / (sum t(q_i) + drafting ms + other ms); 0 for an empty profile."""
    ms = sum(t(q) for q in p.budget_used) + p.draft_ms + p.overhead_ms
    return 1000 * sum(p.accept_lengths) / ms if p.accept_lengths and ms > 0 else 0.0


def profile(rows: Iterable[dict]) -> Optional[StepCosts]:
    """The rows' steps as a cost-model profile: tokens per step, tokens through the target,
    drafting ms (propose + observe) and every other ms of the decode time but the forward; None
    when a row lacks the split."""
    out = StepCosts()
    for row in rows:
        if not has_split(row):
            return None
        steps = len(row.get("accept_lengths") or [])
        if len(row.get("budget_used") or []) != steps:
            return None
        out.accept_lengths += [int(a) for a in row["accept_lengths"]]
        out.budget_used += [int(q) for q in row["budget_used"]]
        drafting = 1000 * (row["propose_time"] + row["observe_time"])
        out.draft_ms += drafting
        out.overhead_ms += 1000 * decode_seconds(row) - 1000 * row["forward_time"] - drafting
    return out if out.accept_lengths else None


def predicted_speedup(method: StepCosts, ar: StepCosts, t: Callable[[int], float]) -> Optional[float]:
    """Predicted tokens/s of `method` over AR's, both from the cost model."""
    base = predicted_tokens_per_s(ar, t)
    mine = predicted_tokens_per_s(method, t)
    return mine / base if base > 0 and mine > 0 else None


def curve_of(manifest: dict, batch_size: int) -> Optional[Callable[[int], float]]:
    """t(q) (ms, made non-decreasing as `--bc auto` does) from a manifest's `cost_curve` when it
    was measured at `batch_size` sequences per forward; None otherwise."""
    record = manifest.get("cost_curve") if isinstance(manifest, dict) else None
    if not isinstance(record, dict):
        return None
    ms = record.get("ms")
    if not isinstance(ms, list) or not ms or not all(_num(v) is not None and v > 0 for v in ms):
        return None
    key = record.get("key") if isinstance(record.get("key"), dict) else {}
    if int(key.get("batch_size") or 1) != batch_size:
        return None
    return monotone([float(v) for v in ms])


def breakdown(rows: Sequence[dict], summary: Optional[pd.DataFrame] = None,
              manifests: Optional[dict[str, dict]] = None) -> pd.DataFrame:
    """One row per method instance (ROW_KEY): steps, #MAT, step ms, each part's ms per step and
    share of decode time (NaN without the split), and the predicted / measured / oracle speedup."""
    manifests = manifests or {}
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row.get("status") == "ok":
            groups.setdefault(_key(row), []).append(row)
    measured = {}
    if summary is not None and len(summary):
        overall = summary[summary["category"] == OVERALL]
        for rec in overall.to_dict("records"):
            measured[(rec["model"], rec["method_label"], int(rec["block_complexity"]), int(rec.get("batch_size", 1)))] = (
                _num(rec.get("speedup")), _num(rec.get("tokens_per_s")))
    out = []
    for key, members in groups.items():
        model, label, bc, n = key
        steps = sum(len(r.get("accept_lengths") or []) for r in members)
        tokens = sum(sum(r.get("accept_lengths") or []) for r in members)
        decode = sum(decode_seconds(r) for r in members)
        rec: dict[str, Any] = dict(zip(ROW_KEY, key))
        rec.update(steps=steps, mat=tokens / steps if steps else math.nan,
                   step_ms=1000 * decode / steps if steps else math.nan)
        split = all(has_split(r) for r in members) and steps > 0 and decode > 0
        spent = 0.0
        for part in PARTS:
            total = sum(float(r[f"{part}_time"]) for r in members) if split else math.nan
            spent += total
            rec[f"{part}_ms"] = 1000 * total / steps if split else math.nan
            rec[f"{part}_share"] = total / decode if split else math.nan
        rec["other_ms"] = 1000 * (decode - spent) / steps if split else math.nan
        rec["other_share"] = (decode - spent) / decode if split else math.nan
        speedup, tps = measured.get(key, (None, None))
        rec["tokens_per_s"] = tps if tps is not None else math.nan
        rec["measured"] = speedup if speedup is not None else math.nan
        oracle = [oracle_tokens(r) for r in members]
        if speedup is not None and steps and tokens and all(o is not None for o in oracle):
            rec["oracle_mat"] = sum(sum(o) for o in oracle) / steps  # type: ignore[arg-type]
            rec["oracle"] = speedup * rec["oracle_mat"] / rec["mat"]
        else:
            rec["oracle_mat"] = rec["oracle"] = math.nan
        rec["predicted"] = _predict(members, groups, manifests, key)
        out.append(rec)
    frame = pd.DataFrame(out)
    if summary is not None and len(frame) and len(summary):  # the main table's row order
        order = {k: i for i, k in enumerate(
            tuple(x) for x in summary[summary["category"] == OVERALL][ROW_KEY].itertuples(index=False))}
        frame = frame.iloc[sorted(range(len(frame)), key=lambda i: order.get(
            tuple(frame.loc[i, ROW_KEY]), len(order)))].reset_index(drop=True)
    return frame


def _predict(members: list[dict], groups: dict[tuple, list[dict]], manifests: dict[str, dict],
             key: tuple) -> float:
    """Predicted speedup of the instance over AR on its own questions (AR's rows of the same model
    and N), with the cost curve of the instance's run; NaN when anything is missing."""
    model, label, bc, n = key
    runs = list(dict.fromkeys(r.get("run_id", "") for r in members))
    t = next((c for c in (curve_of(manifests.get(run, {}), n) for run in runs) if c is not None), None)
    if t is None:
        return math.nan
    mine = profile(members)
    if is_ar_label(label):
        return 1.0 if mine is not None else math.nan
    asked = {_question(r) for r in members}
    ar_label = AR_METHOD + label_suffix(label)  # AR at the instance's temperature
    ar_rows = [r for k, rows in groups.items() if k[0] == model and k[1] == ar_label and k[3] == n
               for r in rows if _question(r) in asked]
    base = profile(ar_rows) if ar_rows else None
    if mine is None or base is None:
        return math.nan
    value = predicted_speedup(mine, base, t)  # per sequence: t is t(N, q); d + o already hold the batch's
    return value if value is not None else math.nan


def auto_predictions(rows: Sequence[dict], manifests: Optional[dict[str, dict]] = None) -> list[dict]:
    """For every `@auto` instance of a run whose manifest holds its `bc_auto` choice: the budget
    chosen, the decode tokens/s `--bc auto` predicted on its calibration questions and the decode
    tokens/s this run measured for it (sum of accept lengths over decode seconds: the prediction's
    basis, prefill excluded)."""
    out = []
    for run, manifest in (manifests or {}).items():
        choices = manifest.get("bc_auto") if isinstance(manifest, dict) else None
        if not isinstance(choices, dict):
            continue
        for spec, record in choices.items():
            if not isinstance(record, dict):
                continue
            try:
                chosen = int(record["chosen"])
                predicted = float(record["candidates"][str(chosen)]["predicted_tokens_per_s"])
            except (KeyError, TypeError, ValueError):
                continue
            members = [r for r in rows if r.get("run_id", "") == run and r.get("status") == "ok"
                       and r.get("method") == spec and int(r.get("block_complexity") or 0) == chosen]
            decode = sum(decode_seconds(r) for r in members)
            tokens = sum(sum(r.get("accept_lengths") or []) for r in members)
            if not members or decode <= 0 or predicted <= 0:
                continue
            out.append({"label": members[0]["method_label"], "bc": chosen, "predicted": predicted,
                        "measured": tokens / decode})
    return out


def auto_note(rows: Sequence[dict], manifests: Optional[dict[str, dict]] = None) -> Optional[str]:
    """One note line: `--bc auto`'s predicted against measured decode tokens/s per instance."""
    found = auto_predictions(rows, manifests)
    if not found:
        return None
    parts = [f"{f['label']} BC {f['bc']}: predicted {f['predicted']:.1f}, measured {f['measured']:.1f} "
             f"(x{f['predicted'] / f['measured']:.2f})" for f in found]
    return ("--bc auto, decode tok/s (prefill excluded) predicted on its calibration questions against this run's: "
            + "; ".join(parts) + ".")


def time_table(rows: Sequence[dict], summary: Optional[pd.DataFrame] = None,
               manifests: Optional[dict[str, dict]] = None) -> Optional[TableData]:
    """The table per method instance (module doc); None without ok rows."""
    frame = breakdown(rows, summary, manifests)
    if frame.empty:
        return None
    keys = row_keys(summary) if summary is not None and len(summary) else ROW_KEY[:2]
    cols = [Column("Model", "model", numeric=False)] if frame["model"].nunique() > 1 else []
    cols.append(Column("Method", "method_label", numeric=False))
    if "block_complexity" in keys or frame["method_label"].astype(str).str.contains("@").any():
        cols.append(Column("BC", "block_complexity", digits=0))
    if "batch_size" in keys or (frame["batch_size"] > 1).any():
        cols.append(Column("N", "batch_size", digits=0))
    cols += [Column("#MAT", "mat"), Column("Tok/s", "tokens_per_s", digits=1), Column("Step ms", "step_ms")]
    cols += [Column(PART_HEADERS[p], f"{p}_ms", share_key=f"{p}_share") for p in SHOWN_PARTS]
    cols += [Column("Pred.", "predicted"), Column("Meas.", "measured"), Column("Oracle", "oracle")]
    notes = list(NOTES)
    if frame["propose_ms"].isna().any():
        notes.append(f"{MISSING} in the parts: rows without the step split (written before it existed, or on CUDA "
                     f"without --time-steps).")
    if frame["predicted"].isna().any():
        notes.append(f"{MISSING} in Pred.: no cost curve at this batch size in the run's manifest (a run records "
                     f"the cached one: `specbench cost` or a `--bc auto` run measures it), or rows without the split.")
    auto = auto_note(rows, manifests)
    if auto:
        notes.append(auto)
    return TableData(TITLE, cols, frame, notes)


def temperature_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """#MAT pooled over steps per (model, method label, BC, N, temperature), ok rows only; the
    label without the temperature a sweep's report gives it (`metrics.label_temperatures`)."""
    sums: dict[tuple, list[int]] = {}
    for row in rows:
        if row.get("status") != "ok":
            continue
        key = _key({**row, "method_label": row.get("plain_label", row["method_label"])})
        acc = sums.setdefault(key + (temperature_of(row),), [0, 0])
        acc[0] += sum(row.get("accept_lengths") or [])
        acc[1] += len(row.get("accept_lengths") or [])
    return pd.DataFrame([dict(zip(ROW_KEY + ["temperature"], k), mat=a / s if s else math.nan)
                         for k, (a, s) in sums.items()],
                        columns=ROW_KEY + ["temperature", "mat"])


def temperature_table(rows: Sequence[dict]) -> Optional[TableData]:
    """#MAT per method instance (rows) against temperature (columns); None unless the rows hold
    at least two temperatures."""
    frame = temperature_frame(rows)
    temps = sorted(frame["temperature"].unique()) if len(frame) else []
    if len(temps) < 2:
        return None
    wide = frame.pivot_table(index=ROW_KEY, columns="temperature", values="mat", aggfunc="first", sort=False)
    wide.columns = [f"mat_t{t:g}" for t in wide.columns]
    wide = wide.reset_index()
    cols = [Column("Model", "model", numeric=False)] if wide["model"].nunique() > 1 else []
    cols.append(Column("Method", "method_label", numeric=False))
    if wide.duplicated(["model", "method_label"]).any():
        cols += [Column("BC", "block_complexity", digits=0), Column("N", "batch_size", digits=0)]
    cols += [Column(f"T={t:g}", f"mat_t{t:g}") for t in temps]
    return TableData(TEMPERATURE_TITLE, cols, wide,
                     ["#MAT pooled over steps at each sampling temperature (0 = greedy); acceptance of a "
                      "lossless method falls as sampling spreads the target's distribution."])


TERMINAL_HEADERS = {"propose": "Prop%", "forward": "Fwd%", "accept": "Acc%", "commit": "Com%", "observe": "Obs%",
                    "other": "Oth%"}


def terminal_table(table: TableData) -> TableData:
    """The time table for a terminal: each part as its share of the decode time only (the files
    carry ms per step too)."""
    frame = table.frame.copy()
    cols = []
    for c in table.columns:
        if c.share_key:
            part = c.key[:-len("_ms")]
            frame[f"{part}_pct"] = 100 * frame[c.share_key]
            cols.append(Column(TERMINAL_HEADERS.get(part, c.header), f"{part}_pct", digits=0))
        elif c.key != "tokens_per_s":
            cols.append(c)
    return TableData(table.title.replace("ms per decoding step (share of decode time)", "share of decode time"),
                     cols, frame, table.notes)
