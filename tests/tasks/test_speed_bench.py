"""`--tasks speed-bench[:SPLIT]`: SPEED-Bench read through `datasets` from a small local copy made
here with the published schema (no network), the hub refused in one line when it cannot be
reached, and its categories and difficulties in the reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

datasets = pytest.importorskip("datasets")

from specbench_cli.errors import UsageError  # noqa: E402
from specbench_cli.tasks import get  # noqa: E402
from specbench_cli.tasks.speed_bench import FIELDS, PLACEHOLDER  # noqa: E402


def speed_row(qid: str, category: str, difficulty: str, turns: list[str], sub: str = "general") -> dict:
    """One row with exactly SPEED-Bench's fields."""
    row = {"question_id": qid, "category": category, "sub_category": sub, "turns": turns, "source": "made-here",
           "src_id": f"made-here_{qid}", "difficulty": difficulty, "multiturn": len(turns) > 1}
    assert tuple(row) == FIELDS
    return row


QUALITATIVE = [speed_row(f"q{c}{i}", category, difficulty, [f"Write about {category} number {i}."])
               for c, category in enumerate(("coding", "qa", "writing"))
               for i, difficulty in enumerate(("easy", "medium", "hard"))]
QUALITATIVE[2]["turns"] = ["Write a poem.", "Now make it shorter."]  # a multi-turn prompt
QUALITATIVE[2]["multiturn"] = True
THROUGHPUT = [speed_row(f"t{i}", tier, "n/a", ["long context " * 20]) for i, tier in
              enumerate(("low_entropy", "mixed", "high_entropy"))]


@pytest.fixture
def copy(tmp_path):
    """A folder laid out like a download of the hub repository: one sub-folder per split."""
    import pandas as pd

    for split, rows in (("qualitative", QUALITATIVE), ("throughput_1k", THROUGHPUT)):
        (tmp_path / "speed" / split).mkdir(parents=True)
        pd.DataFrame(rows).to_parquet(tmp_path / "speed" / split / "test-00000-of-00001.parquet")
    return tmp_path / "speed"


def test_the_qualitative_split_reads_with_categories_difficulty_and_turns(copy):
    qs = get("speed-bench").load(str(copy))
    assert [q.id for q in qs] == [r["question_id"] for r in QUALITATIVE]
    assert {q.category for q in qs} == {"coding", "qa", "writing"} and qs[0].task == "speed-bench"
    assert [q.difficulty for q in qs[:3]] == ["easy", "medium", "hard"] and qs[0].subcategory == "general"
    assert qs[2].turns == ["Write a poem.", "Now make it shorter."]


def test_a_throughput_split_and_single_files_read_too(copy, tmp_path):
    qs = get("speed-bench:throughput_1k").load(str(copy))
    assert [q.category for q in qs] == ["low_entropy", "mixed", "high_entropy"]
    assert qs[0].task == "speed-bench:throughput_1k"
    (tmp_path / "one.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QUALITATIVE))
    assert len(get("speed-bench").load(str(tmp_path / "one.jsonl"))) == len(QUALITATIVE)
    datasets.DatasetDict({"test": datasets.Dataset.from_list(THROUGHPUT)}).save_to_disk(str(tmp_path / "saved"))
    assert len(get("speed-bench:throughput_1k").load(str(tmp_path / "saved"))) == 3


@pytest.mark.parametrize("change, message", [
    (lambda rows: rows[4].update(turns=[PLACEHOLDER + "\n\n{role_name}"]),
     "1 of 9 prompts are placeholders (their source does not allow redistribution); fill them in with NVIDIA's "
     "prepare_data.py"),
    (lambda rows: rows[1].update(turns="  "), "row 1: 'turns' must be a non-empty list of non-empty strings"),
    (lambda rows: rows[3].update(question_id="q00"), "row 3: question_id 'q00' repeats an earlier row"),
    (lambda rows: [r.pop("category") for r in rows], "not SPEED-Bench data: no category field"),
])
def test_unusable_copies_are_one_line_naming_the_row(tmp_path, change, message):
    rows = json.loads(json.dumps(QUALITATIVE))
    change(rows)
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UsageError) as info:
        get("speed-bench").load(str(tmp_path / "bad.jsonl"))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_unknown_split_names_the_real_ones():
    with pytest.raises(UsageError, match="SPEED-Bench has the splits qualitative, throughput_1k, throughput_2k"):
        get("speed-bench:throughput_3k")


def test_without_a_copy_and_without_the_hub_the_run_stops_in_one_line_before_any_model(tmp_path):
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": ""}  # nothing listens there
    env.pop("HF_HUB_OFFLINE")
    res = subprocess.run([sys.executable, "-m", "specbench_cli", "run", "--tasks", "speed-bench", "--model",
                          str(tmp_path / "no-model-needed"), "--output-dir", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --tasks speed-bench: the Hugging Face hub cannot be reached")
    assert "--questions PATH" in lines[0] and not (tmp_path / "runs").exists()


def test_a_run_and_its_report_show_categories_and_difficulty(copy, tiny_model_dir, tmp_path, capsys):
    from helpers.cli import cli, only_run_dir, run_rows

    out = tmp_path / "runs"
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "ar,pld", "--max-new-tokens", "4",
                        "--threads", "1", "--no-report", "--output-dir", str(out), "--tasks", "speed-bench",
                        "--questions", str(copy), "--limit", "2"], capsys)
    assert code == 0, err
    run = only_run_dir(out)
    rows = run_rows(run)
    assert {(r["category"], r["difficulty"]) for r in rows} == {
        (c, d) for c in ("coding", "qa", "writing") for d in ("easy", "medium")}
    code, _, err = cli(["report", str(run), "--format", "markdown", "--no-plots"], capsys)
    assert code == 0, err
    table = (run / "report" / "table.md").read_text()
    assert "| Coding | QA | Writing |" in table  # SPEED-Bench's names, in its order
    assert "Speedup over AR by difficulty" in table and "| easy | medium |" in table
