"""SPEED-Bench (NVIDIA, arXiv 2604.09557; data `nvidia/SPEED-Bench`): the benchmark vLLM, SGLang
and llama.cpp measure speculative decoding on.

`--tasks speed-bench` is its qualitative split: 880 prompts, 80 in each of 11 categories (coding,
humanities, math, multilingual, qa, rag, reasoning, roleplay, stem, summarization, writing), with
a sub-category and a difficulty per prompt; some are multi-turn. `--tasks speed-bench:throughput_1k`
(and `_2k`, `_8k`, `_16k`, `_32k`) are the throughput splits: 1,536 prompts of about that many input
tokens in three entropy tiers (low_entropy, mixed, high_entropy), the category of each row.

Every split has the fields question_id, category, sub_category, turns, source, src_id,
difficulty, multiturn, read through `datasets` (`pip install 'specbench-cli[hf]'`) from a local
copy (`--questions PATH`: a parquet/JSON/JSONL file, a folder `save_to_disk` wrote, or a folder
of data files, with a sub-folder per split name as in a download of the hub repository) or else
from the hub. Prompts whose source forbids redistribution ship as a placeholder; NVIDIA's
`prepare_data.py` (Model-Optimizer, examples/specdec_bench) fills them in, and a copy that still
holds one is refused rather than measured with a placeholder for a prompt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from specbench_cli.errors import RuntimeFailure, UsageError, check_not_special
from specbench_cli.jsonl import check_data_file
from specbench_cli.tasks import TaskSource
from specbench_cli.tasks.base import Question, Task

NAME = "speed-bench"
HUB_ID = "nvidia/SPEED-Bench"
CONFIGS = ("qualitative", "throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k", "throughput_32k")
SPLIT = "test"
FIELDS = ("question_id", "category", "sub_category", "turns", "source", "src_id", "difficulty", "multiturn")
REQUIRED = ("question_id", "category", "turns")
PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
DATA_FILES = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv", ".arrow": "arrow"}
PREPARE = "NVIDIA's prepare_data.py (Model-Optimizer, examples/specdec_bench)"
INSTALL = "pip install 'specbench-cli[hf]'"


class SpeedBench(Task):
    name = NAME
    summary = ("SPEED-Bench's qualitative split (880 prompts, 11 categories); speed-bench:throughput_1k ... "
               "throughput_32k for its input-length buckets (datasets: local copy via --questions, or the hub)")
    categories = {"coding": "Coding", "humanities": "Humanities", "math": "Math", "multilingual": "Multilingual",
                  "qa": "QA", "rag": "RAG", "reasoning": "Reasoning", "roleplay": "Roleplay", "stem": "STEM",
                  "summarization": "Summarization", "writing": "Writing",
                  "low_entropy": "Low entropy", "mixed": "Mixed", "high_entropy": "High entropy"}
    config = "qualitative"

    @classmethod
    def load(cls, questions_path: Optional[str] = None) -> list[Question]:
        rows, where = read_rows(cls.config, questions_path)
        return to_questions(rows, cls.name, where)


def is_speed_bench(name: str) -> bool:
    return isinstance(name, str) and name.startswith(NAME + ":")


def task_for(name: str, settings: object = None) -> type[Task]:
    """The Task class of `speed-bench:CONFIG`; UsageError naming the configs for another one.
    (`settings` are not read: every split has the same fields.)"""
    config = name[len(NAME) + 1:]
    if config not in CONFIGS:
        raise UsageError(f"--tasks {name}: SPEED-Bench has the splits {', '.join(CONFIGS)} "
                         f"(e.g. {NAME}:throughput_1k; {NAME} alone is qualitative)")

    class SpeedBenchSplit(SpeedBench):
        pass

    SpeedBenchSplit.name, SpeedBenchSplit.config = name, config
    return SpeedBenchSplit


SOURCE = TaskSource(NAME + ":CONFIG", f"one of SPEED-Bench's splits: {', '.join(CONFIGS)}", task_for)


# ----------------------------------------------------------------------------- reading


def read_rows(config: str, path: Optional[str]) -> tuple[list[dict], str]:
    """The rows of split `config` and where they came from (for messages): the local copy at
    `path`, else the hub."""
    try:
        import datasets
    except ImportError:
        raise UsageError(f"--tasks {NAME} reads SPEED-Bench through the `datasets` library: {INSTALL}") from None
    if path:
        local = check_not_special(Path(path).expanduser(), "--questions")
        if not local.exists():
            raise UsageError(f"--questions {path}: not found (a SPEED-Bench file or folder)")
        try:
            return [dict(r) for r in _local(datasets, local, config)], str(local)
        except UsageError:
            raise
        except Exception as e:  # noqa: BLE001 - unreadable data files: one line naming them
            raise UsageError(f"--questions {path}: cannot read it as SPEED-Bench ({type(e).__name__}: "
                             f"{_first_line(e)})") from None
    where = f"{HUB_ID} ({config})"
    from specbench_cli.models.load import hub_reachable

    if not os.environ.get("HF_HUB_OFFLINE") and not hub_reachable(timeout=5.0):
        raise RuntimeFailure(f"--tasks {NAME}: the Hugging Face hub cannot be reached to read {where}; download "
                             f"it where the network allows and pass the copy with --questions PATH")
    try:
        return [dict(r) for r in datasets.load_dataset(HUB_ID, config, split=SPLIT)], where
    except Exception as e:  # noqa: BLE001 - network, cache or format trouble: one line
        raise RuntimeFailure(f"--tasks {NAME}: cannot read {where} ({type(e).__name__}: {_first_line(e)}); "
                             f"pass a local copy with --questions PATH") from None


def _local(datasets, local: Path, config: str):
    """The split from a local copy. Every data file passes the guarded reader's checks first
    (jsonl.check_data_file: a regular file, its size, UTF-8 and JSON nesting): `datasets`' JSON
    reader died with a segmentation fault on a file nested 100,000 levels deep."""
    if local.is_file():
        if local.suffix not in DATA_FILES:
            raise UsageError(f"--questions {local}: not a data file datasets reads ({', '.join(DATA_FILES)})")
        check_data_file(local, "--questions")
        return datasets.load_dataset(DATA_FILES[local.suffix], data_files=str(local), split="train")
    if any((local / marker).is_file() for marker in ("dataset_info.json", "state.json", "dataset_dict.json")):
        for path in sorted(local.rglob("*")):
            if path.suffix in DATA_FILES:
                check_data_file(path, "--questions")
        saved = datasets.load_from_disk(str(local))
        if isinstance(saved, datasets.DatasetDict):
            saved = saved[SPLIT] if SPLIT in saved else saved[next(iter(saved))]
        return saved
    folder = local / config if (local / config).is_dir() else local
    files = sorted(p for p in folder.iterdir() if p.suffix in DATA_FILES)
    if not files:
        raise UsageError(f"--questions {local}: no data files ({', '.join(DATA_FILES)}) in {folder}")
    for path in files:
        check_data_file(path, "--questions")
    kinds = {DATA_FILES[p.suffix] for p in files}
    if len(kinds) > 1:
        raise UsageError(f"--questions {local}: data files of several kinds in {folder}; keep one")
    return datasets.load_dataset(kinds.pop(), data_files=[str(p) for p in files], split="train")


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _text(value: object) -> Optional[str]:
    return value if isinstance(value, str) and value.strip() else None


def to_questions(rows: list[dict], task: str, where: str) -> list[Question]:
    """SPEED-Bench rows -> questions; UsageError naming the row for a missing field, a bad type,
    a repeated id, or prompts still held by placeholders."""
    if not rows:
        raise UsageError(f"{where}: no rows")
    missing = [f for f in REQUIRED if f not in rows[0]]
    if missing:
        raise UsageError(f"{where}: not SPEED-Bench data: no {', '.join(missing)} field "
                         f"(SPEED-Bench rows have {', '.join(FIELDS)})")
    questions, seen, placeholders = [], set(), 0
    for i, row in enumerate(rows):
        turns = row.get("turns")
        if isinstance(turns, str):
            turns = [turns]
        if not isinstance(turns, list) or not turns or not all(_text(t) for t in turns):
            raise UsageError(f"{where} row {i}: 'turns' must be a non-empty list of non-empty strings")
        qid, category = row.get("question_id"), _text(row.get("category"))
        if isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
            raise UsageError(f"{where} row {i}: 'question_id' must be a string or an integer")
        if category is None:
            raise UsageError(f"{where} row {i}: 'category' must be a non-empty string")
        if str(qid) in seen:
            raise UsageError(f"{where} row {i}: question_id {qid!r} repeats an earlier row")
        seen.add(str(qid))
        if any(t.startswith(PLACEHOLDER) for t in turns):
            placeholders += 1
            continue
        difficulty = row.get("difficulty")
        questions.append(Question(task=task, id=str(qid), category=category, turns=list(turns),
                                  subcategory=_text(row.get("sub_category")),
                                  difficulty=str(difficulty) if difficulty not in (None, "") else None))
    if placeholders:
        raise UsageError(f"{where}: {placeholders} of {len(rows)} prompts are placeholders (their source does not "
                         f"allow redistribution); fill them in with {PREPARE} and pass the file it writes with "
                         f"--questions")
    return questions
