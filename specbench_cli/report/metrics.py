"""Metrics over result rows (docs/metrics.md has every formula and the reasons for it).

(~390 lines, over the usual ~350: every formula the reports print - #MAT, speedups, MBSU,
k-alpha, quality summaries - stays in one module so docs/metrics.md maps onto one file.)

Everything here is a pure function of the rows of `samples.jsonl` (optionally tagged with
`run_id`, `model` and `target_params` by `runfolder.Run.tagged_rows`). Nothing reads files.

Units:
- a *question* is (run, model, task, question_id, repeat, batch size) with all its turns; its throughput is
  `sum(new_tokens) / sum(wall_time)` over the turns. Questions with an errored turn are left
  out of throughput and speedup (and counted in `n_errors`).
- a *replicate* is (run_id, repeat): speedups are computed per replicate and then averaged.
- rows of several sampling temperatures (`run --temperature 0,0.7,1`) are never pooled: a
  question is one temperature's (its speedup is over AR at that temperature), and
  `label_temperatures` gives each method label its temperature (`pld (T=0.7)`), so every table,
  figure and gate keeps them apart.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from specbench_cli.names import AR, baseline_of, is_baseline
from specbench_cli.store.rows import defaults as _row_defaults
from specbench_cli.tasks.categories import OVERALL, canonical_category, order_categories

AR_METHOD = AR

QUESTION_KEY = ["run_id", "model", "task", "category", "question_id", "repeat", "batch_size", "temperature"]
METHOD_KEY = ["method", "method_label", "block_complexity"]
REPLICATE_KEY = ["run_id", "repeat"]
DEFAULT_BY = ("model", "method_label", "block_complexity", "batch_size", "category")
GROUPABLE = frozenset(QUESTION_KEY + METHOD_KEY)

# Defaults for keys a row may lack (untagged rows, error rows, older writers): the run tags,
# then the sample row's own defaults for the keys metrics read.
ROW_DEFAULTS = {
    "run_id": "",
    "model": "",
    "target_params": None,
    **{k: v for k, v in _row_defaults().items()
       if k in ("task", "block_complexity", "extra_params", "lossless", "method_params", "structure",
                "new_tokens", "wall_time", "steps", "accept_lengths", "draft_sizes", "draft_path_lengths",
                "ar_match", "difficulty", "batch_size", "batch_id", "temperature")},
}
TEMPERATURE_LABEL = re.compile(r" \(T=([^()]*)\)$")  # the suffix `label_temperatures` gives a label


# ----------------------------------------------------------------------------- temperatures


def temperature_of(row: dict) -> float:
    """A row's sampling temperature (older rows: 0, greedy)."""
    return float(row.get("temperature") or 0.0)


def label_temperatures(rows: list[dict]) -> list[dict]:
    """When the rows hold two or more temperatures, each row's `method_label` gets its temperature,
    `pld (T=0.7)`, in place (the plain label stays in `plain_label`), so nothing that groups by
    label pools temperatures; rows of one temperature are left exactly as they are."""
    if len({temperature_of(r) for r in rows}) < 2:
        return rows
    for row in rows:
        if "plain_label" not in row:
            row["plain_label"] = row["method_label"]
            row["method_label"] = f"{row['method_label']} (T={temperature_of(row):g})"
    return rows


def plain_label(label: object) -> str:
    """A method label without the temperature `label_temperatures` gave it."""
    return TEMPERATURE_LABEL.sub("", str(label))


def label_suffix(label: object) -> str:
    """The temperature part of a label (' (T=0.7)'), or ''."""
    found = TEMPERATURE_LABEL.search(str(label))
    return found.group(0) if found else ""


def label_temperature(label: object) -> float:
    """The temperature a label names (0 without one), for ordering."""
    found = TEMPERATURE_LABEL.search(str(label))
    try:
        return float(found.group(1)) if found else 0.0
    except ValueError:
        return 0.0


def is_ar_label(label: object) -> bool:
    """Whether a (table) label is AR's, at any temperature."""
    return plain_label(label) == AR_METHOD


def is_baseline_label(label: object) -> bool:
    """`names.is_baseline` of a label that may carry a temperature."""
    return is_baseline(plain_label(label))


# ----------------------------------------------------------------------------- frames


def to_frame(rows: Sequence[dict] | pd.DataFrame) -> pd.DataFrame:
    """Rows -> DataFrame with every column metrics use (missing keys get neutral defaults)."""
    df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    for key, default in ROW_DEFAULTS.items():
        if key not in df.columns:
            df[key] = [default] * len(df)
    if df.empty:
        return df
    df["question_id"] = df["question_id"].astype(str)
    df["block_complexity"] = df["block_complexity"].fillna(0).astype(int)
    df["batch_size"] = df["batch_size"].fillna(1).astype(int)
    df["temperature"] = df["temperature"].fillna(0.0).astype(float)
    df["category"] = [canonical_category(t, c) for t, c in zip(df["task"], df["category"])]
    for key in ("accept_lengths", "draft_sizes"):
        df[key] = df[key].map(lambda v: list(v) if isinstance(v, (list, tuple)) else [])
    return df


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Only the rows whose status is `ok`."""
    return df[df["status"] == "ok"]


def question_throughputs(rows: Sequence[dict] | pd.DataFrame) -> pd.DataFrame:
    """One row per (method, question): tokens, time, turns and throughput (tokens/s).

    Questions with any errored turn are dropped: their throughput would cover less work.
    """
    df = to_frame(rows)
    keys = METHOD_KEY + QUESTION_KEY
    if df.empty:
        return pd.DataFrame(columns=keys + ["tokens", "time", "turns", "throughput"])
    df["_failed"] = (df["status"] != "ok").astype(int)  # summed per question (a Python call per group is slow)
    grouped = df.groupby(keys, sort=False, dropna=False)
    tp = grouped.agg(
        tokens=("new_tokens", "sum"),
        time=("wall_time", "sum"),
        turns=("turn", "nunique"),
        errors=("_failed", "sum"),
    ).reset_index()
    tp = tp[(tp["errors"] == 0) & (tp["time"] > 0)].drop(columns="errors")
    tp["throughput"] = tp["tokens"] / tp["time"]
    return tp.reset_index(drop=True)


def mean_throughput(tp: pd.DataFrame) -> float:
    """tok/s of a group: the mean of its questions' throughputs (`question_throughputs`); NaN
    without any."""
    return float(tp["throughput"].mean()) if len(tp) else float("nan")


def ar_source_runs(tp: pd.DataFrame, baseline: str = AR_METHOD) -> dict[tuple[str, str], str]:
    """(run_id, model) -> run whose `ar` rows (`baseline`'s: an engine's `ENGINE:ar`) serve as its baseline.

    A run's own `ar` rows are preferred; a run without them borrows those of the first loaded
    run with `ar` rows for the same model at the same batch size (so `report ar_run method_run`
    works; AR at batch size N is the baseline at N).
    """
    cols = ["run_id", "model", "batch_size"]
    ar_pairs = tp.loc[tp["method"] == baseline, cols].drop_duplicates()
    first_ar_run: dict[tuple, str] = {}
    for run_id, model, n in ar_pairs.itertuples(index=False):
        first_ar_run.setdefault((model, n), run_id)
    own = {(run_id, model) for run_id, model, _ in ar_pairs.itertuples(index=False)}
    sources = {}
    for run_id, model, n in tp[cols].drop_duplicates().itertuples(index=False):
        if (run_id, model) in own:
            sources[(run_id, model)] = run_id
        elif (model, n) in first_ar_run:
            sources[(run_id, model)] = first_ar_run[(model, n)]
    return sources


def paired_throughputs(tp: pd.DataFrame) -> pd.DataFrame:
    """Method questions joined with the `ar` throughput of the same question and repeat (an
    engine method's with its engine's `ENGINE:ar`: names.py).

    Only questions both have (with the same number of turns) survive. Adds `ar_throughput`
    and `ratio = throughput / ar_throughput`.
    """
    baselines = [baseline_of(m) for m in tp["method"]]
    sources = {b: ar_source_runs(tp, b) for b in set(baselines)}
    ar = tp[pd.Series([is_baseline(m) for m in tp["method"]], index=tp.index, dtype=bool)]
    ar = ar.groupby(QUESTION_KEY + ["method"], sort=False).agg(
        ar_tokens=("tokens", "sum"), ar_time=("time", "sum"), ar_turns=("turns", "max")
    ).reset_index()
    ar["ar_throughput"] = ar["ar_tokens"] / ar["ar_time"]
    ar = ar.rename(columns={"run_id": "ar_run_id", "method": "baseline"})
    left = tp.assign(baseline=baselines, ar_run_id=[sources[b].get(k) for b, k in
                                                    zip(baselines, zip(tp["run_id"], tp["model"]))])
    join_on = ["ar_run_id", "baseline"] + [k for k in QUESTION_KEY if k != "run_id"]
    # Join keys as objects on both sides: a run with no usable AR question (all rows failed or took
    # no time) leaves empty or all-None columns whose dtypes would not match the other side's.
    left = left.astype({k: object for k in join_on})
    ar = ar.astype({k: object for k in join_on})
    paired = left.merge(ar[join_on + ["ar_throughput", "ar_turns"]], on=join_on, how="inner")
    paired = paired[paired["turns"] == paired["ar_turns"]].copy()
    paired["ratio"] = paired["throughput"] / paired["ar_throughput"]
    return paired.reset_index(drop=True)


# ----------------------------------------------------------------------------- scalar metrics


def spec_bench_speedup(method_throughputs: Iterable[float], ar_throughputs: Iterable[float]) -> float:
    """Spec-Bench speedup: mean per-question throughput of the method over that of AR."""
    method = np.asarray(list(method_throughputs), dtype=float)
    base = np.asarray(list(ar_throughputs), dtype=float)
    if method.size == 0 or base.size == 0:
        return float("nan")
    return float(method.mean() / base.mean())


def replicate_speedups(paired: pd.DataFrame) -> list[float]:
    """Spec-Bench speedup of each replicate (run_id, repeat), in order."""
    return [
        spec_bench_speedup(g["throughput"], g["ar_throughput"])
        for _, g in paired.groupby(REPLICATE_KEY, sort=True)
    ]


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; NaN for fewer than two values)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return float("nan"), float("nan")
    std = float(arr.std(ddof=1)) if arr.size > 1 else float("nan")
    return float(arr.mean()), std


def mean_accepted_tokens(accept_lengths: Iterable[Sequence[int]], steps: Iterable[int]) -> float:
    """#MAT pooled over rows: sum of all accept lengths / sum of all decoding steps."""
    total_steps = sum(int(s) for s in steps)
    if total_steps == 0:
        return float("nan")
    return sum(sum(a) for a in accept_lengths) / total_steps


def mbsu(tau: float, extra_params: int, target_params: int | None, gamma: float) -> float:
    """Memory-bound speedup `tau / (c * gamma + 1)`, c = extra_params / target_params.

    Draft-free methods (extra_params == 0) have c = 0, so MBSU = tau. NaN when a drafter's
    size is known but the target's is not, or its mean draft size is unknown.
    """
    if not extra_params:
        return float(tau)
    if not target_params or not np.isfinite(gamma):
        return float("nan")
    c = extra_params / target_params
    return float(tau / (c * gamma + 1))


def ar_agreement(ar_match: Iterable[object]) -> tuple[float, int, int]:
    """(share of rows matching AR, mismatches, rows compared); None entries are not compared."""
    flags = [bool(v) for v in ar_match if v is not None and not (isinstance(v, float) and np.isnan(v))]
    if not flags:
        return float("nan"), 0, 0
    mismatches = flags.count(False)
    return (len(flags) - mismatches) / len(flags), mismatches, len(flags)


def position_acceptance(
    accept_lengths: Iterable[Sequence[int]], draft_sizes: Iterable[Sequence[int]], max_k: int | None = None
) -> dict[int, float]:
    """k-alpha for k = 1..max_k: among steps that proposed >= k tokens, share accepting >= k.

    "Accepting >= k" means accept_length - 1 >= k (the bonus token is not a draft token).
    `max_k` defaults to the largest draft size seen. Positions no step reached are omitted.
    """
    accepted: list[int] = []
    proposed: list[int] = []
    for acc_row, draft_row in zip(accept_lengths, draft_sizes):
        accepted.extend(a - 1 for a in acc_row)
        proposed.extend(draft_row)
    if not proposed:
        return {}
    acc = np.asarray(accepted[: len(proposed)])
    prop = np.asarray(proposed[: len(accepted)])
    top = int(prop.max()) if max_k is None else max_k
    rates = {}
    for k in range(1, top + 1):
        eligible = prop >= k
        if eligible.any():
            rates[k] = float((acc[eligible] >= k).mean())
    return rates


def path_lengths(accept_lengths: Sequence[int], draft_sizes: Sequence[int], recorded: Sequence[int] | None,
                 chain: bool) -> list[int] | None:
    """Per step, the draft positions on the path the target took (accepted ones plus the refused
    one, if the draft had one there): the row's `draft_path_lengths`, or for a chain drafter's
    older row min(draft size, accepted + 1); None for an older tree row (not recorded)."""
    if recorded is not None and len(recorded) == len(accept_lengths):
        return [int(p) for p in recorded]
    if not chain:
        return None
    return [min(int(d), int(a)) for a, d in zip(accept_lengths, draft_sizes)]


def conditional_acceptance(accept_lengths: Iterable[Sequence[int]], paths: Iterable[Sequence[int] | None],
                           max_k: int | None = None) -> dict[int, float]:
    """P(draft position k accepted | positions 1..k-1 accepted) for k = 1..max_k, pooled over steps:

        p_k = #{steps with accepted >= k} / #{steps with accepted >= k-1 and path length >= k}

    where accepted = accept_length - 1 (the bonus token is the target's, not a draft token) and the
    path length says whether the draft offered position k along the accepted path (`path_lengths`).
    Rows whose paths are None are left out; positions no step offered are omitted."""
    acc: list[int] = []
    reach: list[int] = []
    for lengths, path in zip(accept_lengths, paths):
        if path is None:
            continue
        acc.extend(int(a) - 1 for a in lengths)
        reach.extend(path)
    if not reach:
        return {}
    acc_arr, reach_arr = np.asarray(acc), np.asarray(reach)
    top = int(reach_arr.max()) if max_k is None else max_k
    rates = {}
    for k in range(1, top + 1):
        offered = (reach_arr >= k) & (acc_arr >= k - 1)
        if offered.any():
            rates[k] = float((acc_arr[offered] >= k).mean())
    return rates


def chain_alphas(
    accept_lengths: Iterable[Sequence[int]], draft_sizes: Iterable[Sequence[int]], max_n: int = 3
) -> dict[int, float]:
    """KOALA's / EAGLE's n-alpha for n = 1..max_n of chain drafts: `conditional_acceptance` with a
    chain's path lengths (a step offered position n when it drafted n tokens or more)."""
    accept_lengths, draft_sizes = list(accept_lengths), list(draft_sizes)
    paths = [path_lengths(a, d, None, chain=True) for a, d in zip(accept_lengths, draft_sizes)]
    return conditional_acceptance(accept_lengths, paths, max_n)


def group_conditional_acceptance(rows: pd.DataFrame, max_k: int | None = None) -> dict[int, float]:
    """`conditional_acceptance` of a group's ok rows (AR has none: it drafts nothing)."""
    ok = ok_rows(rows)
    ok = ok[ok["method"] != AR_METHOD]
    if ok.empty:
        return {}
    chain = group_is_chain(ok)
    paths = [path_lengths(a, d, p if isinstance(p, (list, tuple)) else None, chain)
             for a, d, p in zip(ok["accept_lengths"], ok["draft_sizes"], ok["draft_path_lengths"])]
    return conditional_acceptance(ok["accept_lengths"], paths, max_k)


def group_is_chain(rows: pd.DataFrame) -> bool:
    """Whether a group's rows come from a chain drafter (AR excluded): the rows' `structure`,
    else the legacy guess from their method parameters (`is_chain`)."""
    if len(rows) == 0 or (rows["method"] == AR_METHOD).all():
        return False
    structure = next((s for s in rows["structure"] if isinstance(s, str)), None)
    if structure is not None:
        return structure == "chain"
    return is_chain(next((p for p in rows["method_params"] if isinstance(p, dict)), {}))


def accept_length_counts(accept_lengths: Iterable[Sequence[int]]) -> dict[int, int]:
    """How many decoding steps added 1, 2, 3, ... tokens (sorted by length)."""
    counts = Counter(a for row in accept_lengths for a in row)
    return dict(sorted(counts.items()))


VLLM_COUNTERS = ("spec_decode_num_drafts", "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens",
                 "spec_decode_num_accepted_tokens_per_pos")


def vllm_counters(accept_lengths: Iterable[Sequence[int]], draft_sizes: Iterable[Sequence[int]],
                  budget_used: Iterable[Sequence[int]]) -> dict:
    """vLLM's speculative-decoding counters (its Prometheus `vllm:spec_decode_*` names) from the
    per-step row fields, so numbers can be set beside a vLLM deployment's:

    - a draft is a step that proposed at least one token (`draft_sizes` > 0); steps that drafted
      nothing are not drafts, as vLLM observes only requests that were given draft tokens;
    - draft tokens: Σ `draft_sizes` over drafts, every token the target verified, so a tree
      counts all its acceptable nodes (vLLM counts the proposed tokens of a draft, which for a
      tree are its nodes), not only the positions of the path the target took;
    - accepted tokens: Σ (accept length - 1) over drafts (the bonus token is not a draft token);
    - accepted tokens per position: entry k counts the drafts whose k+1-th draft position was
      accepted; one entry per position a draft could reach, max(`budget_used`) - 1 (vLLM: one
      per speculative token), so it sums to the accepted tokens.

    vLLM's mean acceptance length is then 1 + accepted / drafts, and its acceptance rate
    accepted / draft tokens (low for trees, which verify many tokens for one path)."""
    drafts = drafted = accepted = 0
    positions: list[int] = []
    width = max((int(b) for row in budget_used for b in row), default=1) - 1
    per_pos = [0] * max(width, 0)
    for acc_row, draft_row in zip(accept_lengths, draft_sizes):
        for a, d in zip(acc_row, draft_row):
            if int(d) <= 0:
                continue
            drafts += 1
            drafted += int(d)
            accepted += int(a) - 1
            positions.append(int(a) - 1)
    for n in positions:
        if n > len(per_pos):
            per_pos.extend([0] * (n - len(per_pos)))
        for k in range(n):
            per_pos[k] += 1
    return dict(zip(VLLM_COUNTERS, (drafts, drafted, accepted, per_pos)))


# ----------------------------------------------------------------------------- summaries


def _group_metrics(rows: pd.DataFrame, tp: pd.DataFrame, paired: pd.DataFrame) -> dict:
    """All table metrics of one group (rows, its question throughputs, its paired questions)."""
    ok = ok_rows(rows)
    tau = mean_accepted_tokens(ok["accept_lengths"], ok["steps"])
    drafts = [d for row in ok["draft_sizes"] for d in row]
    gamma = float(np.mean(drafts)) if drafts else float("nan")
    extra = int(ok["extra_params"].fillna(0).max()) if len(ok) else 0
    target = next((int(p) for p in ok["target_params"] if p and pd.notna(p)), None)
    speedups = replicate_speedups(paired)
    speedup, speedup_std = mean_std(speedups)
    agreement, mismatches, compared = ar_agreement(ok["ar_match"])
    params = next((p for p in rows["method_params"] if isinstance(p, dict)), {})
    conditional = group_conditional_acceptance(ok)
    alphas = conditional if group_is_chain(ok) else {}  # KOALA's n-alpha: chain drafts only
    return {
        "n_rows": int(len(rows)),
        "n_errors": int((rows["status"] != "ok").sum()),
        "n_questions": int(len(tp)),
        "n_paired": int(len(paired)),
        "n_replicates": len(speedups),
        "mat": tau,
        "al_no_bonus": tau - 1,   # accepted draft tokens per step (the bonus token not counted)
        "conditional_acceptance": conditional,
        "tokens_per_s": mean_throughput(tp),
        "speedup": speedup,
        "speedup_std": speedup_std,
        "replicate_speedups": speedups,
        "median_speedup": float(paired["ratio"].median()) if len(paired) else float("nan"),
        "ar_agreement": agreement,
        "ar_mismatches": mismatches,
        "ar_compared": compared,
        "mean_draft": gamma,
        "extra_params": extra,
        "target_params": target,
        "c": extra / target if extra and target else (0.0 if not extra else float("nan")),
        "mbsu": mbsu(tau, extra, target, gamma),
        "block_complexities": sorted({int(b) for b in rows["block_complexity"]}),
        "lossless": bool(rows["lossless"].dropna().all()) if rows["lossless"].notna().any() else None,
        "method_params": params,
        **{f"alpha{n}": alphas.get(n, float("nan")) for n in (1, 2, 3)},
        # rows of older result files may lack budget_used: the list then ends at the deepest acceptance
        **vllm_counters(ok["accept_lengths"], ok["draft_sizes"],
                        ok["budget_used"] if "budget_used" in ok else [[] for _ in range(len(ok))]),
    }


def _summarize_frames(df: pd.DataFrame, tp: pd.DataFrame, paired: pd.DataFrame, by: list[str]) -> list[dict]:
    """One metrics dict per group of `by`, computed from pre-built frames."""
    tp_groups = dict(iter(tp.groupby(by, sort=False, dropna=False)))
    paired_groups = dict(iter(paired.groupby(by, sort=False, dropna=False)))
    records = []
    for key, rows in df.groupby(by, sort=False, dropna=False):
        empty_tp, empty_paired = tp.iloc[0:0], paired.iloc[0:0]
        metrics = _group_metrics(rows, tp_groups.get(key, empty_tp), paired_groups.get(key, empty_paired))
        records.append({**dict(zip(by, key)), **metrics})
    return records


def summarize(
    rows: Sequence[dict] | pd.DataFrame, by: Sequence[str] = DEFAULT_BY, overall: bool = True
) -> pd.DataFrame:
    """Metrics per group; with `category` in `by` and `overall`, also category `overall`.

    `by` may use any of: model, method, method_label, block_complexity, batch_size, run_id,
    task, category, question_id, repeat. The `overall` rows pool all questions (Spec-Bench's
    `--task overall`), they are not an average of the category figures.
    """
    by = list(by)
    unknown = [b for b in by if b not in GROUPABLE]
    if unknown:
        raise ValueError(f"cannot group by {unknown}; choose from {sorted(GROUPABLE)}")
    df = to_frame(rows)
    if df.empty:
        return pd.DataFrame(columns=by)
    tp = question_throughputs(df)
    paired = paired_throughputs(tp)
    records = _summarize_frames(df, tp, paired, by)
    if overall and "category" in by:
        pooled = [frame.assign(category=OVERALL) for frame in (df, tp, paired)]
        records += _summarize_frames(*pooled, by)
    return sort_summary(pd.DataFrame(records))


def sort_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Sort by model, then AR first, then method label, BC and category in table order."""
    if summary.empty:
        return summary
    order = {c: i for i, c in enumerate(order_categories(summary.get("category", pd.Series(dtype=str))))}
    keys = pd.DataFrame(index=summary.index)
    if "model" in summary:
        keys["model"] = summary["model"]
    if "method_label" in summary:
        keys["not_ar"] = ~summary["method_label"].map(is_ar_label)
        keys["label"] = summary["method_label"].map(plain_label)
        keys["temperature"] = summary["method_label"].map(label_temperature)
    for col in ("block_complexity", "batch_size", "run_id", "repeat"):
        if col in summary:
            keys[col] = summary[col]
    if "category" in summary:
        keys["category"] = summary["category"].map(order)
    ordered = keys.sort_values(list(keys.columns), kind="stable").index
    return summary.loc[ordered].reset_index(drop=True)


def distribution_by_method(
    rows: Sequence[dict] | pd.DataFrame, by: Sequence[str] = ("model", "method_label")
) -> dict[tuple, dict[int, int]]:
    """Accepted-length counts per group (default: per model and method), ok rows only."""
    df = ok_rows(to_frame(rows))
    return {
        key if isinstance(key, tuple) else (key,): accept_length_counts(g["accept_lengths"])
        for key, g in df.groupby(list(by), sort=False)
    }


def position_acceptance_by_method(
    rows: Sequence[dict] | pd.DataFrame, by: Sequence[str] = ("model", "method_label"), max_k: int | None = None
) -> dict[tuple, dict[int, float]]:
    """k-alpha curves per group of chain drafters (see `is_chain`); AR and trees are skipped."""
    df = ok_rows(to_frame(rows))
    curves = {}
    for key, g in df.groupby(list(by), sort=False):
        if not group_is_chain(g):
            continue
        rates = position_acceptance(g["accept_lengths"], g["draft_sizes"], max_k)
        if rates:
            curves[key if isinstance(key, tuple) else (key,)] = rates
    return curves


def is_chain(method_params: dict | None) -> bool:
    """Whether a drafter proposes one chain, for rows written before the `structure` field.

    Uses `method_params["structure"]` (or `"draft_structure"`) when present; otherwise a
    drafter whose parameters mention a tree (e.g. `tree`, `tree_choices`) counts as a tree.
    """
    params = method_params or {}
    structure = params.get("structure", params.get("draft_structure"))
    if structure is not None:
        return str(structure).lower() == "chain"
    return not any("tree" in str(key).lower() and params[key] for key in params)
