"""Baselines and the regression check (`specbench baseline`, `specbench check`): plain functions."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from rich import box
from rich.markup import escape
from rich.table import Table

from specbench_cli import __version__
from specbench_cli.atomic import atomic_write
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.jsonl import read_json_object
from specbench_cli.report import gate, metrics, render
from specbench_cli.report import table as report
from specbench_cli.store.runfolder import Run
from specbench_cli.tasks.categories import display_category

BASELINE_FORMAT = "specbench-baseline"
BASELINE_VERSION = 2   # 2: per-question records for the statistical gate (`questions`, `threads`)
BASELINE_KEY = ("model", "method_label", "block_complexity", "category")


# Run settings a baseline records and `check` requires to be equal (the suite, the model and
# whatever changes #MAT or speedup); the questions file's path is machine-specific, so not here.
SETTINGS = ("model", "tasks", "categories", "limit", "question_ids", "max_new_tokens", "dtype", "device",
            "temperature", "top_p", "forward", "prompt_template", "batch_size")


def run_settings(run: Run) -> dict:
    """The SETTINGS of a run, from its manifest's config (absent keys are None). `forward` is the
    path the target really ran (`auto` resolved, from `model.forward`; runs made before `auto`
    existed recorded only `config.forward`, and runs before `--forward` existed used `sdpa`):
    the same questions decode at different speeds on different paths."""
    config = run.manifest.get("config") or {}
    settings = {key: config.get(key) for key in SETTINGS}
    settings["forward"] = (run.manifest.get("model") or {}).get("forward") or config.get("forward") or "sdpa"
    settings["prompt_template"] = config.get("prompt_template") or "auto"  # runs before the option: auto
    settings["batch_size"] = config.get("batch_size") or 1  # runs before the option: one sequence at a time
    return settings


def run_threads(run: Run) -> int | None:
    """The torch threads the run was timed with (manifest config), or None."""
    threads = (run.manifest.get("config") or {}).get("threads")
    return threads if isinstance(threads, int) and not isinstance(threads, bool) else None


def baseline_document(summary: pd.DataFrame, runs: list[Run], rows: list[dict]) -> dict:
    """The baseline JSON: one entry per (model, method, BC, category incl. overall), the
    settings of the run it was made from, and one record per (method, question) for the
    statistical gate (`gate.question_records`: paired ratio and accepted lengths)."""
    entries = [
        {**{k: row[k] for k in BASELINE_KEY}, "mat": row["mat"], "speedup": row["speedup"], "n": row["n_paired"]}
        for _, row in summary.iterrows()
    ]
    return render.jsonable({
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runs": [run.run_id for run in runs],
        "specbench": __version__,
        "settings": run_settings(runs[0]) if len(runs) == 1 else None,
        "threads": run_threads(runs[0]) if len(runs) == 1 else None,
        "entries": entries,
        "questions": gate.question_records(rows),
    })


def _number_or_null(v: object) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


def _positive_or_null(v: object) -> bool:
    """null, or a finite number > 0: a speedup or #MAT of 0 or below is no measurement."""
    return v is None or (_number_or_null(v) and v > 0)


def _whole(v: object, least: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


# top-level key -> (check, what it wants); a key written by every version, checked when present
HEADER_TYPES = {
    "version": (lambda v: _whole(v, 1) and v <= BASELINE_VERSION,
                f"an integer from 1 to {BASELINE_VERSION} (the versions this specbench reads; write the baseline "
                f"again with `specbench baseline`)"),
    "created": (lambda v: v is None or isinstance(v, str), "a string"),
    "runs": (lambda v: v is None or (isinstance(v, list) and all(isinstance(r, str) for r in v)), "a list of run ids"),
    "specbench": (lambda v: v is None or isinstance(v, str), "a string"),
    "settings": (lambda v: v is None or isinstance(v, dict), "an object"),
    "threads": (lambda v: v is None or _whole(v, 1), "an integer >= 1 or null"),
}


# entry key -> (check, what it wants)
ENTRY_TYPES = {
    "model": (lambda v: isinstance(v, str), "a string"),
    "method_label": (lambda v: isinstance(v, str), "a string"),
    "block_complexity": (lambda v: _whole(v), "an integer >= 0"),
    "category": (lambda v: isinstance(v, str), "a string"),
    "mat": (_positive_or_null, "a finite number > 0 or null"),
    "speedup": (_positive_or_null, "a finite number > 0 or null"),
    "n": (lambda v: v is None or _whole(v), "an integer >= 0"),
}


def _accept_lists(v: object) -> bool:
    return v is None or (isinstance(v, list) and all(
        isinstance(turn, list) and all(_whole(x) for x in turn) for turn in v))


# per-question record key -> (check, what it wants)
QUESTION_TYPES = {
    "model": (lambda v: isinstance(v, str), "a string"),
    "method_label": (lambda v: isinstance(v, str), "a string"),
    "block_complexity": (lambda v: _whole(v), "an integer >= 0"),
    "task": (lambda v: isinstance(v, str), "a string"),
    "category": (lambda v: isinstance(v, str), "a string"),
    "question_id": (lambda v: isinstance(v, str), "a string"),
    "ratio": (lambda v: v is None or (_number_or_null(v) and v > 0), "a number > 0 or null"),
    "accept_lengths": (_accept_lists, "a list of lists of integers >= 0, or null"),
}


def _check_questions(path: Path, doc: dict) -> None:
    """Per-question records (version 2): a non-empty list of well-typed records, at least one with
    a speedup, so that `check` has speed to compare (`questions: []`, or the baseline of a run
    whose AR rows failed, let the gate pass without comparing any)."""
    questions = doc.get("questions")
    if questions is None:
        if doc.get("version", 1) >= 2:
            raise UsageError(f"{path}: a version {doc['version']} baseline must hold 'questions' (the per-question "
                             f"speedups `check` compares)")
        return
    if not isinstance(questions, list):
        raise UsageError(f"{path}: 'questions' must be a list")
    for i, record in enumerate(questions):
        if not isinstance(record, dict):
            raise UsageError(f"{path}: question record {i} must be an object")
        for key, (check, wants) in QUESTION_TYPES.items():
            if key not in record:
                raise UsageError(f"{path}: question record {i} lacks '{key}'")
            if not check(record[key]):
                raise UsageError(f"{path}: question record {i}: '{key}' must be {wants}, "
                                 f"got {json.dumps(record[key])[:40]}")
    if not any(record["ratio"] is not None for record in questions):
        raise UsageError(f"{path}: no question record holds a speedup over AR ('questions' is empty, or every "
                         f"ratio is null: made from a run whose AR rows failed?), so a check would compare no speed")


def read_baseline(path: Path) -> dict:
    """A baseline document with well-typed entries; `UsageError` naming the file (and entry)
    if it is missing, not a baseline, or has no entries (a check would compare nothing)."""
    doc = read_json_object(path, f"baseline file not found: {path}")
    if doc.get("format") != BASELINE_FORMAT or not isinstance(doc.get("entries"), list):
        raise UsageError(f"{path}: not a specbench baseline (write one with `specbench baseline RUN_DIR -o FILE`)")
    if not doc["entries"]:
        raise UsageError(f"{path}: the baseline has no entries, so a check against it would compare nothing")
    for key, (check, wants) in HEADER_TYPES.items():
        if key in doc and not check(doc[key]):
            raise UsageError(f"{path}: '{key}' must be {wants}, got {json.dumps(doc[key])[:40]}")
    for i, entry in enumerate(doc["entries"]):
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: entry {i} must be an object")
        missing = [k for k in BASELINE_KEY + ("mat", "speedup") if k not in entry]
        if missing:
            raise UsageError(f"{path}: entry {i} lacks {', '.join(missing)}")
        for key, (check, wants) in ENTRY_TYPES.items():
            if key in entry and not check(entry[key]):
                raise UsageError(f"{path}: entry {i}: '{key}' must be {wants}, got {json.dumps(entry[key])[:40]}")
    _check_questions(path, doc)
    return doc


def mismatches(doc: dict, run: Run, rows: list[dict]) -> list[str]:
    """How the baseline's suite, model or settings differ from the run's ('' list: they match).

    Recorded settings are compared key by key; for every baseline (including older ones without
    settings) the models, block complexities and categories of its entries must be the run's."""
    found = []
    recorded = doc.get("settings") or {}
    current = run_settings(run)
    for key in SETTINGS:
        if key in recorded and recorded[key] != current[key]:
            found.append(f"{key}: baseline {json.dumps(recorded[key])}, run {json.dumps(current[key])}")
    frame = metrics.to_frame(rows)
    entries = doc["entries"]
    for key, have in (("model", {run.model_name}), ("block_complexity", {int(b) for b in frame["block_complexity"]})):
        want = {e[key] for e in entries}
        if not want <= have:
            found.append(f"{key}: baseline {_listing(want)}, run {_listing(have)}")
    want = {e["category"] for e in entries} - {metrics.OVERALL}
    have = set(frame["category"])
    if want != have:
        found.append(f"categories: baseline {_listing(want)}, run {_listing(have)}")
    return found


LEGACY_SPEEDUP_TOL = 0.25  # the point rule's allowed drop, for baselines without per-question data


def exact_acceptance(doc: dict, run: Run) -> tuple[bool, str]:
    """Whether accepted lengths must equal the baseline's question by question: greedy decoding in
    float32 (the run's settings, which `mismatches` made the baseline's) with the same threads
    (another thread count sums in another order, and a near tie may then flip). Returns
    (True, "") or (False, why not; "" when the run is simply not greedy float32)."""
    settings = run_settings(run)
    if settings.get("temperature") not in (0, 0.0, None) or settings.get("dtype") not in ("float32", None):
        return False, ""
    base, now = doc.get("threads"), run_threads(run)
    if base is not None and now is not None and base != now:
        return False, f"the baseline was made with {base} thread(s), the run with {now}"
    return True, ""


def _listing(values: set) -> str:
    return ",".join(sorted(str(v) for v in values)) or "none"


def relative(before: float | None, after: float | None) -> float:
    """(after - before) / before; NaN when either is missing or before is 0."""
    if before is None or after is None or not before or not math.isfinite(before) or not math.isfinite(after):
        return float("nan")
    return (after - before) / abs(before)


def check_entries(summary: pd.DataFrame, entries: list[dict], mat_tol: float, speedup_tol: float | None) -> list[dict]:
    """Compare a summary with baseline entries; one record per entry that moved.

    #MAT is checked both ways (greedy acceptance is deterministic: a rise can be a
    verification bug just as a fall can be a drafter bug). With `speedup_tol` (the point rule of
    baselines without per-question data) a speedup fails when it drops by more than
    `speedup_tol`, and a rise beyond it is reported as `faster`; None leaves speed to the
    statistical gate (`gate.judge_speed`). An entry missing from the run is a regression; a
    missing speedup is checked only if the baseline had one.
    """
    current = {tuple(row[k] for k in BASELINE_KEY): row for _, row in summary.iterrows()}
    moved = []
    for entry in entries:
        key = tuple(entry[k] for k in BASELINE_KEY)
        row = current.get(key)
        record = {**dict(zip(BASELINE_KEY, key)), "mat_base": entry["mat"], "speedup_base": entry["speedup"],
                  "mat_now": None, "speedup_now": None, "problems": [], "regression": False}
        if row is None:
            record["problems"].append("missing from run")
            record["regression"] = True
            moved.append(record)
            continue
        record["mat_now"], record["speedup_now"] = row["mat"], row["speedup"]
        mat_change = relative(entry["mat"], row["mat"])
        if entry["mat"] is not None and not (abs(mat_change) <= mat_tol):
            record["problems"].append(f"#MAT {_pct(mat_change)}")
            record["regression"] = True
        speed_change = relative(entry["speedup"], row["speedup"])
        if entry["speedup"] is not None and speedup_tol is not None:
            if not speed_change >= -speedup_tol:
                record["problems"].append(f"speedup {_pct(speed_change)}")
                record["regression"] = True
            elif speed_change > speedup_tol:
                record["problems"].append(f"faster {_pct(speed_change)}")
        if record["problems"]:
            moved.append(record)
    return moved


def nothing_compared(summary: pd.DataFrame, entries: list[dict]) -> str | None:
    """Why `check` would compare nothing (None when at least one baseline number meets the run's):
    no entry has a #MAT or speedup, or no entry's (model, method, BC, category) is in the run."""
    if not any(_num(e.get("mat")) is not None or _num(e.get("speedup")) is not None for e in entries):
        return "every baseline entry has #MAT and speedup null (made from a run whose rows all failed?)"
    current = {tuple(row[k] for k in BASELINE_KEY) for _, row in summary.iterrows()}
    if not any(tuple(e[k] for k in BASELINE_KEY) in current for e in entries):
        return "no baseline entry's (model, method, BC, category) is in the run"
    return None


@dataclass
class Judgement:
    """What `check` found: entries that moved, the speed verdicts, the failure lines of the
    statistical and exact checks, notes, and the speed tolerance applied."""

    moved: list[dict]
    regressions: int
    verdicts: list[gate.SpeedVerdict]
    failures: list[str]
    notes: list[str]
    tolerance: float

    @property
    def failed(self) -> bool:
        return bool(self.regressions or self.failures)


def judge(doc: dict, run: Run, rows: list[dict], summary: pd.DataFrame, mat_tol: float, speedup_tol: float | None,
          confidence: float, resamples: int, seed: int) -> Judgement:
    """The whole check of `run` against the baseline `doc` (already matched by `mismatches`):
    #MAT per entry, speed by the statistical gate (or, for a baseline without per-question
    records, the point rule), and accepted lengths exactly where decoding is deterministic."""
    statistical = doc.get("questions") is not None
    tol = speedup_tol if speedup_tol is not None else (gate.DEFAULT_TOLERANCE if statistical else LEGACY_SPEEDUP_TOL)
    notes, failures, verdicts = [], [], []
    if not statistical:
        notes.append("the baseline holds no per-question data (written by an older specbench): each entry's speedup "
                     f"is compared as one number (-{tol:.0%} allowed); write the baseline again with `specbench "
                     f"baseline` for the statistical gate")
    moved = check_entries(summary, doc["entries"], mat_tol, None if statistical else tol)
    if statistical:
        now = gate.question_records(rows)
        check_pairing(doc, now)
        verdicts = gate.judge_speed(doc["questions"], now, tol, confidence, resamples, seed)
        failures += [f"{v.key[1]} (BC {v.key[2]}) is slower: {v.change:+.1%}, interval [{v.low:+.1%}, {v.high:+.1%}] "
                     f"below -{tol:.0%}" for v in verdicts if v.verdict == "slower"]
        exact, why_not = exact_acceptance(doc, run)
        if exact:
            failures += [gate.accept_change_line(c) for c in gate.accept_changes(doc["questions"], now)]
        elif why_not:
            notes.append(f"accepted lengths not compared exactly: {why_not}")
    return Judgement(moved, sum(rec["regression"] for rec in moved), verdicts, failures, notes, tol)


SHOWN = 5  # unpaired questions named in the one line; the count says how many more


def unpaired(base_records: list[dict], now_records: list[dict]) -> tuple[list[str], int]:
    """The baseline's questions with a speedup that the run has none for ('pld (BC 8) qa/203'),
    and how many baseline questions have a speedup at all. A method the run lacks altogether is
    left out: `check_entries` reports it as missing from the run, a regression (exit 1)."""
    now = gate.by_method(now_records)
    missing, total = [], 0
    for key, questions in gate.by_method(base_records).items():
        if key not in now:
            continue
        for qk, q in questions.items():
            if q.get("ratio") is None:
                continue
            total += 1
            if now.get(key, {}).get(qk, {}).get("ratio") is None:
                missing.append(f"{key[1]} (BC {key[2]}) {q['category']}/{q['question_id']}")
    return missing, total


def check_pairing(doc: dict, now_records: list[dict]) -> None:
    """`check` compares speed or fails: every baseline question with a speedup must have one in the
    run (the same question, AR and the method both ok), and every method whose entries carry a
    speedup must have such questions; a UsageError naming how many and which otherwise. Without
    this, other question ids or failed AR rows left nothing to compare and the gate passed."""
    timed = {gate.method_key(q) for q in doc["questions"] if q.get("ratio") is not None}
    untimed = sorted({(e["model"], e["method_label"], e["block_complexity"]) for e in doc["entries"]
                      if e.get("speedup") is not None and not metrics.is_ar_label(e["method_label"])} - timed, key=str)
    if untimed:
        raise UsageError(f"the baseline has speedups but no per-question records for "
                         f"{', '.join(f'{m} (BC {b})' for _, m, b in untimed)}, so their speed cannot be compared")
    missing, total = unpaired(doc["questions"], now_records)
    if missing:
        shown = ", ".join(missing[:SHOWN]) + (f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else "")
        raise UsageError(f"only {total - len(missing)} of the baseline's {total} questions pair with the run, so "
                         f"their speed cannot be compared; no speedup over AR in the run for {shown} (other "
                         f"questions, or failed rows: make the baseline from a run of the same questions, or "
                         f"`run --resume RUN --retry-errors`)")


def _pct(change: float) -> str:
    """'+12.3%', or 'missing' for NaN."""
    return f"{change * 100:+.1f}%" if math.isfinite(change) else "missing"


def diff_table(moved: list[dict]) -> Table:
    """Rich table of baseline entries that moved (model column only when several models)."""
    with_model = len({rec["model"] for rec in moved}) > 1
    grid = Table(title="Baseline check: what moved", header_style="bold cyan", box=box.SIMPLE_HEAD)
    headers = (["Model"] if with_model else []) + ["Method", "BC", "Category", "#MAT\nbase → now",
                                                   "Speedup\nbase → now", "Verdict"]
    for header in headers:
        grid.add_column(header, justify="right" if header in ("BC",) or "→" in header else "left")
    for rec in moved:
        verdict = ("[red]FAIL[/]\n" if rec["regression"] else "[green]ok[/]\n") + escape("\n".join(rec["problems"]))
        cells = [escape(str(rec["model"]))] if with_model else []
        cells += [escape(str(rec["method_label"])), str(rec["block_complexity"]),
                  display_category(rec["category"]),
                  f"{report.format_value(_num(rec['mat_base']))} → {report.format_value(_num(rec['mat_now']))}",
                  f"{report.format_value(_num(rec['speedup_base']))} → {report.format_value(_num(rec['speedup_now']))}",
                  verdict]
        grid.add_row(*cells)
    return grid


def _num(value: object) -> float | None:
    return None if value is None else float(value)


def check_source(runs: list[Run], rows: list[dict], doc: dict) -> None:
    """A baseline must hold speed a check can compare: a UsageError for a run with no successful
    AR row (no speedup exists), or with no question whose method and AR rows both succeeded."""
    where = runs[0].path if len(runs) == 1 else "the runs"
    if not any(row["method"] == metrics.AR_METHOD and row["status"] == "ok" for row in rows):
        raise UsageError(f"{where} has no successful AR row, so no speedup exists to make a baseline of "
                         f"(rerun the failed rows with `specbench run --resume RUN --retry-errors`)")
    if not any(record["ratio"] is not None for record in doc["questions"]):
        raise UsageError(f"{where} has no question with a measured speedup over AR (a method and AR both ok, "
                         f"in a time above zero), so a baseline of it would hold no speed to compare")


def write_baseline(summary: pd.DataFrame, runs: list[Run], rows: list[dict], output: Path) -> dict:
    """Write the baseline JSON for `summary` (and the per-question records of `rows`) to
    `output`; return the document."""
    doc = baseline_document(summary, runs, rows)
    check_source(runs, rows, doc)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(output, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {output}: {exc}") from exc
    return doc
