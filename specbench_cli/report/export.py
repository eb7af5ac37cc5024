"""Spec-Bench answer files from result rows (`specbench export`): plain functions."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path

import pandas as pd

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import RuntimeFailure

EXPORT_FORMATS = ("spec-bench",)


def safe_name(text: str) -> str:
    """A file-name-safe version of a label: 'lookahead(W=5,N=3)' -> 'lookahead_W=5_N=3_'."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text)


# characters of an answer file's name before its suffix (a file system holds 255 bytes per name;
# a method label may be any length)
MAX_STEM = 120


def answer_file(model: object, label: object, repeat: int | None, taken: dict[str, tuple]) -> str:
    """The answer file of (model, label, repeat): 'MODEL-LABEL[-rN].jsonl' (`safe_name`). A stem past
    MAX_STEM characters is cut and ends in a digest of the label; so does one that `taken` (name ->
    the (model, label) that has it) holds for another label ('a/b' and 'a_b' are both 'a_b')."""
    owner = (str(model), str(label))
    stem = f"{safe_name(owner[0])}-{safe_name(owner[1])}"
    suffix = (f"-r{repeat}" if repeat is not None else "") + ".jsonl"
    digest = "-" + hashlib.sha1("\0".join(owner).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    if len(stem) > MAX_STEM:
        stem = stem[:MAX_STEM - len(digest)] + digest
    elif taken.get(stem + suffix, owner) != owner:
        stem += digest
    taken[stem + suffix] = owner
    return stem + suffix


def _question_id(qid: str) -> int | str:
    """Spec-Bench question ids are ints; keep strings that are not."""
    return int(qid) if str(qid).isdigit() else qid


def _epoch(timestamp: str | None) -> float | None:
    """ISO-8601 -> seconds since the epoch (Spec-Bench's `tstamp`)."""
    try:
        return datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def spec_bench_answers(rows: list[dict]) -> tuple[dict[str, list[dict]], int]:
    """Spec-Bench answer lines per file name, and the number of questions skipped (an errored
    or missing turn). Every turn is written at most once, even from a file with duplicate rows.

    One file per (model, method_label, repeat) — the repeat is in the name only when a run
    has several. One line per question with all turns ok; lists run over turns except
    `accept_lengths`, which is concatenated over turns (as Spec-Bench writes it).
    """
    frame = pd.DataFrame(rows)
    frame["question_id"] = frame["question_id"].astype(str)
    frame["task"] = frame["task"].fillna("") if "task" in frame else ""  # rows of older writers lack it
    # each turn once (the first row of a duplicated key, as the readers keep it)
    frame = frame.drop_duplicates(["run_id", "method", "task", "question_id", "turn", "repeat"], keep="first")
    # a question has as many turns as the most any row of it shows; fewer means unfinished
    n_turns = frame.groupby(["run_id", "task", "question_id"])["turn"].transform("max") + 1
    frame = frame.assign(expected_turns=n_turns)
    multi_repeat = frame.groupby(["run_id", "method_label"])["repeat"].nunique().gt(1).any()
    files: dict[str, list[dict]] = {}
    taken: dict[str, tuple] = {}
    skipped = 0
    keys = ["run_id", "model", "method_label", "repeat", "task", "question_id"]
    for (run_id, model, label, repeat, _task, qid), group in frame.groupby(keys, sort=False):
        group = group.sort_values("turn")
        if (group["status"] != "ok").any() or list(group["turn"]) != list(range(group["expected_turns"].iloc[0])):
            skipped += 1
            continue
        name = answer_file(model, label, repeat if multi_repeat else None, taken)
        files.setdefault(name, []).append({
            "question_id": _question_id(qid),
            "category": group["category"].iloc[0],
            "answer_id": hashlib.sha1(f"{run_id}/{label}/{qid}/{repeat}".encode()).hexdigest()[:22],
            "model_id": f"{model}-{label}",
            "choices": [{
                "index": 0,
                "turns": list(group["output_text"].fillna("")),
                "new_tokens": [int(v) for v in group["new_tokens"]],
                "wall_time": [float(v) for v in group["wall_time"]],
                "accept_lengths": [int(a) for row in group["accept_lengths"] for a in row],
                "decoding_steps": [int(v) for v in group["steps"]],
            }],
            "tstamp": _epoch(group["timestamp"].iloc[-1]) if "timestamp" in group else None,
        })
    return files, skipped


def write_answers(files: dict[str, list[dict]], output: Path) -> None:
    """Write one JSONL file per name into `output`."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        for name, lines in files.items():
            text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
            atomic_write(output / name, text)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write to {output}: {exc}") from exc
