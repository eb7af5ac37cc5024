"""Synthetic result rows and run folders, for the readers, metrics and reports."""

from __future__ import annotations

import json
import random
from pathlib import Path

TARGET_PARAMS = 134_515_008  # SmolLM2-135M


DRAFT_PARAMS = 33_000_000


def make_row(
    method: str,
    question_id: str | int,
    accept_lengths: list[int],
    wall_time: float,
    *,
    category: str = "qa",
    turn: int = 0,
    repeat: int = 0,
    draft_sizes: list[int] | None = None,
    label: str | None = None,
    status: str = "ok",
    ar_match: bool | None = None,
    extra_params: int = 0,
    block_complexity: int = 8,
    task: str = "spec_bench",
    method_params: dict | None = None,
    new_tokens: int | None = None,
) -> dict:
    """One samples.jsonl row per the contract; new_tokens = 1 (prefill) + sum(accept_lengths)."""
    drafts = draft_sizes if draft_sizes is not None else [0] * len(accept_lengths)
    tokens = new_tokens if new_tokens is not None else 1 + sum(accept_lengths)
    ok = status == "ok"
    return {
        "method": method,
        "method_label": label or method,
        "method_params": method_params if method_params is not None else {},
        "lossless": True,
        "extra_params": extra_params,
        "task": task,
        "category": category,
        "question_id": str(question_id),
        "turn": turn,
        "repeat": repeat,
        "status": status,
        "error": None if ok else "RuntimeError: boom",
        "block_complexity": block_complexity,
        "temperature": 0.0,
        "top_p": 1.0,
        "prompt_tokens": 42,
        "new_tokens": tokens if ok else 0,
        "wall_time": wall_time if ok else 0.0,
        "prefill_time": 0.01,
        "steps": len(accept_lengths) if ok else 0,
        "accept_lengths": accept_lengths if ok else [],
        "draft_sizes": drafts if ok else [],
        "budget_used": [d + 1 for d in drafts] if ok else [],
        "draft_time": 0.1 * wall_time,
        "verify_time": 0.8 * wall_time,
        "overhead_time": 0.1 * wall_time,
        "output_ids": list(range(tokens)) if ok else [],
        "output_text": f"answer {question_id}.{turn}" if ok else "",
        "ar_match": None if method == "ar" else ar_match,
        "first_mismatch": None,
        "timestamp": "2025-05-01T12:00:00+00:00",
    }


def manifest(run_id: str = "20250501-120000-abcdef", model: str = "smollm2-135m", params: int = TARGET_PARAMS,
             repeats: int = 1, block_complexity: int = 8) -> dict:
    """A manifest.json per the contract."""
    return {
        "run_id": run_id,
        "created": "2025-05-01T12:00:00+00:00",
        "finished": "2025-05-01T12:30:00+00:00",
        "config": {"model": model, "methods": ["ar", "pld", "sps"], "method_options": {}, "tasks": ["spec_bench"],
                   "categories": None, "limit": None, "question_ids": None, "block_complexity": block_complexity,
                   "max_new_tokens": 128, "dtype": "float32", "device": "cpu", "threads": 4, "temperature": 0.0,
                   "top_p": 1.0, "seed": 0, "repeats": repeats, "warmup": 1, "draft_model": None},
        "model": {"ref": model, "resolved": f"/models/{model}", "params": params, "name": model},
        "versions": {"python": "3.11", "torch": "2.13.0", "transformers": "5.0", "specbench": "0.1.0"},
        "host": {"platform": "Linux", "processor": "x86_64", "cpu_count": 8, "device_name": "cpu"},
        "git_commit": None,
    }


def write_run(folder: Path, rows: list[dict], **manifest_kwargs) -> Path:
    """Write manifest.json + samples.jsonl into `folder` (created) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    info = manifest(run_id=folder.name, **manifest_kwargs)
    (folder / "manifest.json").write_text(json.dumps(info), encoding="utf-8")
    with open(folder / "samples.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return folder


CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


# method -> (label, extra_params, chain?, draft size, acceptance prob per drafted token, drafter cost / token)
METHODS = {
    "pld": ("pld", 0, True, 4, 0.55, 0.0002),
    "sps": ("sps(k=4)", DRAFT_PARAMS, True, 4, 0.7, 0.006),
    "lookahead": ("lookahead(W=5,N=3,G=3)", 0, False, 6, 0.35, 0.001),
}


def synthetic_rows(seed: int = 0, methods=("pld", "sps", "lookahead"), questions_per_category: int = 4,
                   repeats: int = 1, block_complexity: int = 8, turns: int = 2, acceptance_scale: float = 1.0) -> list[dict]:
    """Realistic rows: AR plus drafters with geometric acceptance, ~25 ms per target forward."""
    rng = random.Random(seed)
    rows = []
    for repeat in range(repeats):
        for c, category in enumerate(CATEGORIES):
            for q in range(questions_per_category):
                qid = f"{c * 100 + q}"
                for turn in range(turns if category == "mt_bench" else 1):
                    length = rng.randint(40, 120)
                    forward = 0.025 * rng.uniform(0.95, 1.05)
                    rows.append(make_row("ar", qid, [1] * (length - 1), length * forward, category=category,
                                         turn=turn, repeat=repeat, block_complexity=block_complexity))
                    for method in methods:
                        rows.append(_drafter_row(rng, method, qid, category, turn, repeat, length, forward,
                                                 block_complexity, acceptance_scale))
    return rows


def _drafter_row(rng, method, qid, category, turn, repeat, length, forward, bc, scale) -> dict:
    """One drafter row whose accepted lengths follow a per-token acceptance probability."""
    label, extra, chain, gamma, alpha, draft_cost = METHODS[method]
    gamma = min(gamma, bc - 1)
    alpha = min(0.95, alpha * scale * (1.3 if category == "summarization" else 1.0))
    accepts, drafts, produced = [], [], 1
    while produced < length:
        proposed = rng.randint(max(1, gamma - 1), gamma)
        accepted = 0
        while accepted < proposed and rng.random() < alpha:
            accepted += 1
        accepts.append(accepted + 1)
        drafts.append(proposed)
        produced += accepted + 1
    params = {"structure": "chain" if chain else "tree", "draft_len": gamma}
    wall = len(accepts) * forward * (1 + 0.05 * gamma) + sum(drafts) * draft_cost + forward
    return make_row(method, qid, accepts, wall, category=category, turn=turn, repeat=repeat, draft_sizes=drafts,
                    label=label, ar_match=rng.random() > 0.02, extra_params=extra, block_complexity=bc,
                    method_params=params, new_tokens=min(length, produced))
