"""Distillation dataset: the target answers seed instructions at several temperatures.

Each seed instruction is wrapped in the target's chat template (one user turn, generation
prompt added) and answered by the target with ancestral sampling at each temperature
(temperature 0 = greedy; top-p nucleus filtering for T > 0, no top-k). One JSONL row per
(instruction, temperature):

    {"id", "category", "instruction", "response", "temperature", "top_p", "target",
     "max_new_tokens", "response_tokens", "finished", "seed"}

`finished` is true when the target emitted its end-of-turn token within `max_new_tokens`.
Rows are appended and flushed as soon as a batch finishes; re-running with the same output
skips (id, temperature) pairs already written, so an interrupted run resumes.

The shipped seed set (tasks/data/seed_instructions.jsonl) is written for this
project and shares no question with Spec-Bench, so drafters trained on it can be evaluated on
Spec-Bench without overlap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from specbench_cli import tasks as _tasks_package
from specbench_cli.errors import UsageError, open_no_link
from specbench_cli.jsonl import read_objects
from specbench_cli.models.prompting import encode_chat, stop_token_ids, user_turn

SEEDS_FILE = Path(_tasks_package.__file__).resolve().parent / "data" / "seed_instructions.jsonl"
DEFAULT_TEMPERATURES = (0.0, 0.3, 0.7, 1.0)


def parse_temperatures(text: str) -> list[float]:
    """'0,0.3,0.7,1.0' -> [0.0, 0.3, 0.7, 1.0] (UsageError on bad input)."""
    try:
        temps = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"--temperatures must be comma-separated numbers, got '{text}'") from None
    if not temps or any(t < 0 for t in temps):
        raise UsageError(f"--temperatures needs at least one value, all >= 0, got '{text}'")
    return list(dict.fromkeys(temps))


def load_jsonl(path: Path, what: str) -> list[dict]:
    """Read a JSONL file of objects; UsageError naming the first bad line."""
    rows = [row for _, row in read_objects(path, what)]
    if not rows:
        raise UsageError(f"{what} {path} is empty")
    return rows


ASSISTANT_ROLES = {"gpt", "assistant", "bot", "model"}
RESPONSE_FIELDS = ("response", "output", "completion", "answer")


def is_dataset(path: Any) -> bool:
    """`hf:PATH_OR_ID[:CONFIG][:SPLIT]`: a dataset read through `datasets` (tasks/hf.py)."""
    from specbench_cli.tasks.hf import is_hf

    return is_hf(str(path))


def dataset_rows(name: str, template: str | None = None) -> list[dict]:
    """Training rows (instruction, response) from a dataset: a ShareGPT-style conversation column
    gives its first user turn and the assistant turn after it; otherwise an instruction column
    (tasks/hf.py's prompt columns) and a response column (RESPONSE_FIELDS). The rows carry
    `template` (the command's --prompt-template, default auto): these answers were not generated
    from a prompt, so the prompts are encoded the way the command is told."""
    from specbench_cli.tasks.hf import QUESTION_FIELDS, load_rows

    rows, _ = load_rows(name)
    out = []
    for i, row in enumerate(rows):
        pair = _conversation_pair(row) or _columns_pair(row, QUESTION_FIELDS)
        if pair is None:
            raise UsageError(f"{name} row {i}: no (instruction, response) pair: expected a conversation column "
                             f"(ShareGPT from/value or role/content) or instruction and response columns "
                             f"(columns: {', '.join(sorted(row))})")
        rid = row.get("id", row.get("question_id", i))
        out.append({"id": str(rid), "instruction": pair[0], "response": pair[1], "finished": True,
                    "prompt_template": template or "auto", "source": name})
    if not out:
        raise UsageError(f"{name}: the dataset has no rows")
    return out


def _conversation_pair(row: dict) -> tuple[str, str] | None:
    for key in ("conversations", "messages"):
        conv = row.get(key)
        if not isinstance(conv, list):
            continue
        turns = [(m.get("from", m.get("role")), m.get("value", m.get("content"))) for m in conv if isinstance(m, dict)]
        for (role, text), (next_role, answer) in zip(turns, turns[1:]):
            if role in ("human", "user") and next_role in ASSISTANT_ROLES and isinstance(text, str) \
                    and isinstance(answer, str) and text.strip() and answer.strip():
                return text, answer
    return None


def _columns_pair(row: dict, prompt_fields) -> tuple[str, str] | None:
    prompt = next((row[f] for f in prompt_fields if isinstance(row.get(f), str) and row[f].strip()), None)
    answer = next((row[f] for f in RESPONSE_FIELDS if isinstance(row.get(f), str) and row[f].strip()), None)
    return (prompt, answer) if prompt and answer else None


def load_training_rows(data: Path | str, what: str, template: str | None = None) -> list[dict]:
    """Rows of a training command's --data: a JSONL file, or an `hf:` dataset (dataset_rows)."""
    if is_dataset(data):
        return dataset_rows(str(data), template)
    return load_jsonl(Path(data), what)


def load_seeds(path: Path | None = None, limit: int | None = None) -> list[dict]:
    """Seed instructions: rows with a non-empty "instruction" (and optional "id", "category").

    Rows without an id get "seed-<line>". `limit` keeps the first N rows (the shipped file is
    ordered round-robin over categories, so any prefix is balanced).
    """
    if path is not None and is_dataset(path):  # a dataset's prompts (first user turn of each row)
        from specbench_cli.tasks.hf import Fields, load_rows, to_questions

        raw, label = load_rows(str(path))
        rows = [{"id": q.id, "category": q.category, "instruction": q.turns[0]}
                for q in to_questions(raw, str(path), label, Fields())]
    else:
        rows = load_jsonl(path or SEEDS_FILE, "seed file")
    seeds = []
    for i, row in enumerate(rows, 1):
        inst = row.get("instruction")
        if not isinstance(inst, str) or not inst.strip():
            raise UsageError(f"seed file row {i} has no 'instruction' string")
        seeds.append({"id": str(row.get("id", f"seed-{i}")), "category": row.get("category", ""),
                      "instruction": inst.strip()})
    if len({s["id"] for s in seeds}) != len(seeds):
        raise UsageError("seed file has duplicate ids")
    if limit is not None:
        if limit < 1:
            raise UsageError("--limit must be >= 1")
        seeds = seeds[:limit]
    return seeds


def chat_prompt(tokenizer: Any, instruction: str, template: str = "auto") -> list[int]:
    """Token ids of the prompt for one user turn, encoded exactly as `specbench run` does with
    `--prompt-template template`."""
    return encode_chat(tokenizer, user_turn(instruction), template)


def row_template(row: dict) -> str:
    """The prompt template a data row was generated with (rows from before the field: auto)."""
    return row.get("prompt_template") or "auto"


def data_template(rows: list[dict], path: Path, wanted: str | None = None) -> str:
    """The one prompt template of `rows`; UsageError when they mix templates or differ from
    `wanted` (a training command's --prompt-template): the answers were generated for the
    prompts in the data's template, so training on other prompts would teach the wrong thing."""
    found = sorted({row_template(r) for r in rows})
    if len(found) > 1:
        raise UsageError(f"{path} mixes prompt templates ({', '.join(found)}); train on one at a time")
    have = found[0] if found else (wanted or "auto")
    if wanted is not None and wanted != have:
        raise UsageError(f"{path} was generated with --prompt-template {have}, not {wanted}: regenerate it with "
                         f"`specbench train drafter distill-data --prompt-template {wanted}` (or drop the flag)")
    return have


def generate_batch(model: Any, tokenizer: Any, prompts: list[list[int]], temperature: float, top_p: float,
                   max_new_tokens: int) -> list[tuple[list[int], bool]]:
    """Answer a batch of prompts (left-padded). Returns per prompt (response ids without the
    stop token, finished flag)."""
    import torch

    stops = stop_token_ids(tokenizer, model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    att = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        att[i, width - len(p):] = 1
    kwargs = dict(do_sample=False) if temperature == 0 else dict(do_sample=True, temperature=temperature,
                                                                 top_p=top_p, top_k=0)
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(input_ids=ids.to(device), attention_mask=att.to(device), max_new_tokens=max_new_tokens,
                             eos_token_id=stops, pad_token_id=pad, **kwargs)
    results = []
    for row in out[:, width:].tolist():
        cut = next((j for j, t in enumerate(row) if t in stops), None)
        results.append((row if cut is None else row[:cut], cut is not None))
    return results


def generate_distill_data(model: Any, tokenizer: Any, seeds: list[dict], out_path: Path, target_ref: str,
                          temperatures=DEFAULT_TEMPERATURES, top_p: float = 0.95, max_new_tokens: int = 128,
                          batch_size: int = 8, seed: int = 0,
                          on_batch: Callable[[int], None] | None = None, template: str = "auto") -> dict:
    """Write (or complete) the distillation JSONL at `out_path`.

    For every temperature, seeds are answered in batches of `batch_size`; the RNG is reseeded
    per batch with (seed, temperature index, batch index) so rows are reproducible and a resumed
    run samples the same way. `on_batch(n_rows)` is called after each batch (progress).
    Returns {"written": rows added now, "skipped": rows already present, "total": rows in file}.
    """
    import torch

    if not 0 < top_p <= 1:
        raise UsageError(f"--top-p must be in (0, 1], got {top_p}")
    if max_new_tokens < 1 or batch_size < 1:
        raise UsageError("--max-new-tokens and --batch-size must be >= 1")
    out_path = Path(out_path).expanduser()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out_path.exists() and out_path.stat().st_size:
        old = load_jsonl(out_path, "distillation file")
        data_template(old, out_path, template)  # a resumed file keeps one template
        done = {(r.get("id"), float(r.get("temperature", -1))) for r in old}
    written = skipped = 0
    # appended through a descriptor that never follows a link at the name (refused, exit 2)
    fd = open_no_link(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with open(fd, "a", encoding="utf-8") as f:
        for ti, temp in enumerate(temperatures):
            for bi in range(0, len(seeds), batch_size):
                batch = seeds[bi:bi + batch_size]
                todo = [s for s in batch if (s["id"], float(temp)) not in done]
                skipped += len(batch) - len(todo)
                if todo:
                    torch.manual_seed((seed * 1_000_003 + ti * 10_007 + bi // batch_size) % (2 ** 31))
                    prompts = [chat_prompt(tokenizer, s["instruction"], template) for s in todo]
                    answers = generate_batch(model, tokenizer, prompts, temp, top_p, max_new_tokens)
                    for s, (resp, finished) in zip(todo, answers):
                        row = {**s, "response": tokenizer.decode(resp, skip_special_tokens=True),
                               "temperature": float(temp), "top_p": float(top_p), "target": target_ref,
                               "max_new_tokens": max_new_tokens, "response_tokens": len(resp),
                               "finished": finished, "seed": seed, "prompt_template": template}
                        f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    f.flush()
                    written += len(todo)
                if on_batch:
                    on_batch(len(batch))
    return {"written": written, "skipped": skipped, "total": len(done) + written}
