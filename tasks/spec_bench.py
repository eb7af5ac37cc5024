"""Spec-Bench: 480 questions in six categories (MT-bench, translation, summarization, QA,
math reasoning, RAG), Apache-2.0.

The file is never shipped with specbench. It is found, in order, at `--questions PATH`,
`$SPECBENCH_QUESTIONS`, `../shared/data/spec_bench/question.jsonl` (next to a checkout or
the current folder), or in the cache, where it is downloaded once from a pinned commit of
Spec-Bench and checked against its sha256.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path
from typing import Optional

from specbench_cli.errors import RuntimeFailure, UsageError, check_not_special
from specbench_cli.tasks.base import SPEC_BENCH_NAMES, Question, Task, read_jsonl_questions

# Spec-Bench's first 80 questions are MT-bench; its table reports them as one category.
MT_BENCH_SUBCATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")

SPEC_BENCH_COMMIT = "fd2c1cd7d2201ef71db4c5f4e455008f017967bf"
URL = f"https://raw.githubusercontent.com/hemingkx/Spec-Bench/{SPEC_BENCH_COMMIT}/data/spec_bench/question.jsonl"
SHA256 = "4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def local_candidates() -> list[Path]:
    rel = Path("shared") / "data" / "spec_bench" / "question.jsonl"
    here = Path(__file__).resolve()
    cands = []
    if os.environ.get("SPECBENCH_QUESTIONS"):
        cands.append(Path(os.environ["SPECBENCH_QUESTIONS"]))
    cands += [Path.cwd().parent / rel, here.parents[2] / rel, Path.cwd() / rel]
    return cands


def download(dest: Path, url: Optional[str] = None, sha256: str = SHA256, timeout: float = 60.0) -> Path:
    """Fetch the question file to `dest` and verify its checksum; a mismatch keeps nothing."""
    url = url or os.environ.get("SPECBENCH_QUESTIONS_URL", URL)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, tmp.open("wb") as f:
            while chunk := resp.read(1 << 16):
                f.write(chunk)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise RuntimeFailure(f"could not download Spec-Bench questions from {url} ({e}); "
                             f"pass --questions PATH to use a local copy") from None
    got = sha256_of(tmp)
    if got != sha256:
        tmp.unlink(missing_ok=True)
        raise RuntimeFailure(f"downloaded Spec-Bench questions have sha256 {got}, expected {sha256}; not used")
    tmp.replace(dest)
    return dest


def find_questions(path: Optional[str] = None, allow_download: bool = True) -> Path:
    if path:
        p = check_not_special(Path(path).expanduser(), "questions file")  # by type, before anything opens it
        if not p.is_file():
            raise UsageError(f"questions file not found: {path}")
        return p
    for cand in local_candidates():
        if cand.is_file():
            return cand
    from specbench_cli.models.load import cache_root

    cached = cache_root() / "data" / "spec_bench" / "question.jsonl"
    if cached.is_file() and sha256_of(cached) == SHA256:
        return cached
    if not allow_download:
        raise UsageError("Spec-Bench questions not found locally; pass --questions PATH")
    return download(cached)


class SpecBench(Task):
    name = "spec_bench"
    summary = "Spec-Bench: 480 questions, 6 categories (file found locally or downloaded and sha256-checked)"
    categories = SPEC_BENCH_NAMES
    fold = {sub: "mt_bench" for sub in MT_BENCH_SUBCATEGORIES}
    scorers = {"math_reasoning": "gsm8k"}  # GSM8K references end in "#### <number>"

    @classmethod
    def load(cls, questions_path: Optional[str] = None) -> list[Question]:
        return cls.attach_scorers(read_jsonl_questions(find_questions(questions_path), cls.name, cls.fold))
