"""A sweep grid: read GRID.toml strictly, then expand it into jobs.

One job = one model x method set x block complexity x dtype x batch size x task shard. AR runs inside every
job (the `run` command always adds it), so each speedup is measured in one process on one device.
A shard is one category (default), every selected question (`shard = "none"`), or a fixed number
of questions (`shard = N`).

A job's id is a readable slug plus a hash of every setting that changes what it measures, so the
same grid always yields the same ids (re-running a sweep finds its finished and half-done jobs)
and a changed setting yields a new job instead of mixing old rows into it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import tomllib

from specbench_cli.config.grid import grid_schema
from specbench_cli.errors import UsageError, check_not_special
from specbench_cli.jsonl import MAX_JSON_DEPTH, too_deep
from specbench_cli.names import AR
from specbench_cli.options import is_int

# key -> (check, what the check wants, default): the run options' own declarations (config/fields.py),
# plus how a grid splits a task's questions into jobs
SCHEMA: dict[str, tuple[Callable[[Any], bool], str, Any]] = {
    **grid_schema(),
    "shard": (lambda v: v in ("category", "none") or (is_int(v) and v >= 1),
              "'category', 'none' or a number of questions >= 1", "category"),
}


@dataclass
class Grid:
    path: Path
    models: list[str]
    method_sets: list[list[str]]
    bcs: list  # ints, or "auto"
    dtypes: list[str]
    tasks: list[str]
    categories: Optional[list[str]]
    shard: Any
    repeats: int
    max_new_tokens: int
    limit: Optional[int]
    threads: int
    questions: Optional[str]          # as written in the grid
    questions_path: Optional[str]     # resolved against the grid file's folder
    device: str
    seed: int
    prompt_template: str = "auto"
    question_field: Optional[str] = None
    reference_field: Optional[str] = None
    category_field: Optional[str] = None
    id_field: Optional[str] = None
    scorer: Optional[str] = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch_sizes: list = field(default_factory=lambda: [1])


def load_grid(path: Path) -> Grid:
    """Parse and validate GRID.toml; any problem is one `UsageError` naming the file and key."""
    path = check_not_special(path, "grid file")
    try:
        text = path.read_text(encoding="utf-8")
        if too_deep(text):  # tomllib recurses into nested arrays and inline tables too
            raise UsageError(f"{path}: not valid TOML (nested deeper than {MAX_JSON_DEPTH} levels)")
        doc = tomllib.loads(text)
    except FileNotFoundError:
        raise UsageError(f"grid file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: not valid TOML: {exc or 'nested too deeply'}") from None
    for key in doc:
        if key not in SCHEMA:
            from specbench_cli.errors import did_you_mean

            raise UsageError(f"{path}: unknown key '{key}'.{did_you_mean(key, SCHEMA)} Known: {', '.join(SCHEMA)}")
    values = {}
    for key, (check, wants, default) in SCHEMA.items():
        if key not in doc:
            if key == "methods":
                raise UsageError(f"{path}: 'methods' is required (e.g. methods = [\"pld\", \"lookahead\"])")
            values[key] = default
        elif not check(doc[key]):
            raise UsageError(f"{path}: '{key}' must be {wants}, got {json.dumps(doc[key], default=str)}")
        else:
            values[key] = doc[key]
    methods = values.pop("methods")
    sets = [methods] if all(isinstance(m, str) for m in methods) else methods
    for name, opts in values["options"].items():
        if not any(name in s for s in sets):
            raise UsageError(f"{path}: 'options.{name}' is for a method that is in no method set")
    questions = values["questions"]
    resolved = str((path.parent / questions).resolve()) if questions else None
    return Grid(path=path, method_sets=[list(dict.fromkeys(s)) for s in sets], questions_path=resolved, **values)


@dataclass
class Job:
    """One `specbench run`: `settings` are hashed into `id`; `args` are the CLI arguments."""

    id: str
    settings: dict
    args: list[str]
    units: int      # (question, turn) pairs x methods incl. AR x repeats: generations this job makes
    tokens: int     # upper bound on generated tokens: units x max_new_tokens

    def describe(self) -> str:
        s = self.settings
        shard = ",".join(s["categories"]) if s["question_ids"] is None else f"{len(s['question_ids'])} questions"
        batch = f"  n={s['batch_size']}" if s.get("batch_size", 1) != 1 else ""
        return (f"{s['model']}  ar+{'+'.join(s['methods'])}  bc={s['bc']}{batch}  {s['dtype']}  "
                f"{s['task']}:{shard}")


def job_id(settings: dict) -> str:
    """'<model>-bc<BC>-<dtype>-<task>-<shard>-<10 hex of sha256(settings)>', filesystem safe."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    shard = settings["categories"][0] if len(settings["categories"]) == 1 else "all"
    if settings["question_ids"] is not None:
        shard = f"q{settings['question_ids'][0]}"
    batch = f"-n{settings['batch_size']}" if settings.get("batch_size", 1) != 1 else ""
    slug = f"{Path(settings['model']).name}-bc{settings['bc']}{batch}-{settings['dtype']}-{settings['task']}-{shard}"
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", slug)[:80] + "-" + digest


def shards(grid: Grid, questions: list[tuple[str, str, int]]) -> list[tuple[list[str], Optional[list[str]], int]]:
    """Split one task's selected questions [(id, category, turns)] into (categories, ids, turns)."""
    if grid.shard == "category":
        cats = list(dict.fromkeys(c for _, c, _ in questions))
        return [([c], None, sum(t for _, qc, t in questions if qc == c)) for c in cats]
    if grid.shard == "none":
        return [(list(dict.fromkeys(c for _, c, _ in questions)), None, sum(t for *_, t in questions))]
    out = []
    for i in range(0, len(questions), grid.shard):
        part = questions[i:i + grid.shard]
        out.append((list(dict.fromkeys(c for _, c, _ in part)), [q for q, _, _ in part], sum(t for *_, t in part)))
    return out


DEFAULT_MAX_JOBS = 1000
MAX_JOBS = 100_000  # the highest --max-jobs: jobs are built in memory (and listed) before any runs


def expand(grid: Grid, select: Callable[[str], list[tuple[str, str, int]]],
           max_jobs: int = DEFAULT_MAX_JOBS) -> list[Job]:
    """All jobs of the grid, in a stable order. `select(task)` -> selected [(id, category, turns)].
    UsageError, before any job is built, when the grid expands to more than `max_jobs`."""
    per_task = {task: shards(grid, select(task)) for task in grid.tasks}
    count = sum(len(s) for s in per_task.values()) * len(grid.models) * len(grid.method_sets) * len(grid.bcs) \
        * len(grid.dtypes) * len(grid.batch_sizes)
    if count > max_jobs:
        raise UsageError(f"{grid.path}: the grid expands to {count} jobs, more than --max-jobs {max_jobs} "
                         f"(raise --max-jobs if you mean it)")
    jobs = []
    for task in grid.tasks:
        task_shards = per_task[task]
        for model in grid.models:
            for methods in grid.method_sets:
                for bc in grid.bcs:
                    for dtype in grid.dtypes:
                        for n in grid.batch_sizes:
                            for cats, ids, turns in task_shards:
                                jobs.append(_job(grid, model, methods, bc, dtype, task, cats, ids, turns, n))
    return jobs


def _job(grid: Grid, model: str, methods: list[str], bc: int, dtype: str, task: str, cats: list[str],
         ids: Optional[list[str]], turns: int, batch_size: int = 1) -> Job:
    opts = {m: {k: _option_text(v) for k, v in grid.options[m].items()} for m in methods if m in grid.options}
    settings = {"model": model, "methods": methods, "bc": bc, "dtype": dtype, "task": task,
                "questions": grid.questions, "categories": cats, "question_ids": ids,
                "limit": grid.limit if ids is None else None, "max_new_tokens": grid.max_new_tokens,
                "repeats": grid.repeats, "threads": grid.threads, "device": grid.device, "seed": grid.seed,
                "options": opts}
    # only when set, so the ids of older grids' jobs stay the same
    for key in ("prompt_template", "question_field", "reference_field", "category_field", "id_field", "scorer"):
        if getattr(grid, key) not in (None, "auto"):
            settings[key] = getattr(grid, key)
    if batch_size != 1:
        settings["batch_size"] = batch_size
    args = ["run", "--model", model, "--methods", ",".join(methods), "--block-complexity", str(bc),
            "--dtype", dtype, "--tasks", task, "--max-new-tokens", str(grid.max_new_tokens),
            "--repeats", str(grid.repeats), "--threads", str(grid.threads), "--device", grid.device,
            "--seed", str(grid.seed)]
    if batch_size != 1:
        args += ["--batch-size", str(batch_size)]
    if grid.questions_path:
        args += ["--questions", grid.questions_path]
    if grid.prompt_template != "auto":
        template = grid.prompt_template
        if template.endswith(".jinja"):
            template = str((grid.path.parent / template).resolve())
        args += ["--prompt-template", template]
    for key in ("question_field", "reference_field", "category_field", "id_field", "scorer"):
        if getattr(grid, key) is not None:
            args += ["--" + key.replace("_", "-"), getattr(grid, key)]
    if ids is None:
        args += ["--categories", ",".join(cats)] + (["--limit", str(grid.limit)] if grid.limit else [])
    else:
        args += ["--question-ids", ",".join(ids)]
    for m, kv in opts.items():
        for k, v in kv.items():
            args += ["--option", f"{m}.{k}={v}"]
    units = turns * (1 + len([m for m in methods if m != AR])) * grid.repeats
    return Job(id=job_id(settings), settings=settings, args=args, units=units, tokens=units * grid.max_new_tokens)


def _option_text(value: Any) -> str:
    """TOML value -> the text `--option M.K=V` expects (booleans as true/false)."""
    return str(value).lower() if isinstance(value, bool) else str(value)
