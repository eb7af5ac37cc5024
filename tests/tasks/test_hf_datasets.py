"""`--tasks hf:...`: questions (and training rows) from data files read through `datasets`,
made in the test (no network)."""

from __future__ import annotations

import json

import pytest

datasets = pytest.importorskip("datasets")

from specbench_cli.errors import UsageError  # noqa: E402
from specbench_cli.tasks import get  # noqa: E402
from specbench_cli.tasks.hf import Fields, hf_task, parse  # noqa: E402

GSM = [{"problem": "What is 2+3?", "answer": "2+3=5 #### 5", "subject": "add"},
       {"problem": "What is 7*6?", "answer": "#### 42", "subject": "mul"},
       {"problem": "What is 1+1?", "answer": "#### 2", "subject": "add"}]
SHAREGPT = [{"id": "c1", "conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello!"},
                                           {"from": "human", "value": "Tell a joke"},
                                           {"from": "gpt", "value": "No."}]},
            {"id": "c2", "conversations": [{"from": "system", "value": "be brief"},
                                           {"from": "human", "value": "Name a color"},
                                           {"from": "gpt", "value": "Red."}]}]


@pytest.fixture
def files(tmp_path):
    import pandas as pd

    pd.DataFrame(GSM).to_parquet(tmp_path / "gsm.parquet")
    (tmp_path / "chat.json").write_text(json.dumps(SHAREGPT))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"question_id": i, "prompt": f"say {i}"}) + "\n"
                                                 for i in range(4)))
    datasets.Dataset.from_list(GSM).save_to_disk(str(tmp_path / "saved"))
    return tmp_path


def test_names_parse_with_optional_config_and_split():
    assert parse("hf:org/data") == parse("hf:org/data::")
    src = parse("hf:org/data:main:test")
    assert (src.path, src.config, src.split) == ("org/data", "main", "test")
    for bad in ("hf:", "hf::x", "hf:a:b:c:d"):
        with pytest.raises(UsageError, match="hf:PATH_OR_ID"):
            parse(bad)


def test_parquet_rows_map_through_the_fields(files):
    task = hf_task(f"hf:{files}/gsm.parquet", Fields(question="problem", reference="answer", category="subject",
                                                     scorer="gsm8k"))
    qs = task.load()
    assert [q.turns for q in qs] == [["What is 2+3?"], ["What is 7*6?"], ["What is 1+1?"]]
    assert [q.category for q in qs] == ["add", "mul", "add"] and [q.id for q in qs] == ["0", "1", "2"]
    assert qs[1].reference_for(0) == "#### 42" and qs[1].scorer == "gsm8k"


def test_defaults_find_the_prompt_and_id_and_name_the_category_after_the_file(files):
    qs = get(f"hf:{files}/rows.jsonl").load()
    assert [q.id for q in qs] == ["0", "1", "2", "3"] and {q.category for q in qs} == {"rows"}
    assert qs[2].turns == ["say 2"] and qs[0].reference is None
    # problem is a known prompt column too; a folder from save_to_disk loads the same rows
    assert [q.turns for q in get(f"hf:{files}/saved").load()] == [[r["problem"]] for r in GSM]


def test_sharegpt_conversations_become_user_turns(files):
    qs = get(f"hf:{files}/chat.json").load()
    assert qs[0].id == "c1" and qs[0].turns == ["Hi there", "Tell a joke"]
    assert qs[1].turns == ["Name a color"]


@pytest.mark.parametrize("name, fields, message", [
    ("hf:{d}/missing.parquet", Fields(), "file or folder not found"),
    ("hf:{d}/gsm.parquet", Fields(question="nope"), "--question-field nope: no such column"),
    ("hf:{d}/gsm.parquet", Fields(category="nope"), "--category-field nope: no such column"),
    ("hf:{d}/gsm.parquet", Fields(id="subject"), "id 'add' repeats row 0"),
    ("hf:{d}/gsm.parquet::test", Fields(), "test"),
    ("hf:{d}/gsm.parquet", Fields(question="problem", scorer="gsm8k"), "--scorer needs --reference-field"),
    ("hf:{d}/gsm.parquet", Fields(question="answer", id="subject"), "repeats"),
])
def test_bad_mappings_and_sources_are_usage_errors(files, name, fields, message):
    with pytest.raises(UsageError, match=message):
        hf_task(name.format(d=files), fields).load()


def test_a_run_reads_a_parquet_file_scores_it_and_refuses_fields_without_an_hf_task(
        files, tiny_model_dir, tmp_path, capsys):
    from helpers.cli import cli, only_run_dir, run_rows

    out = tmp_path / "runs"
    args = ["run", "--model", str(tiny_model_dir), "--methods", "ar,pld", "--max-new-tokens", "4", "--threads", "1",
            "--no-report", "--output-dir", str(out), "--tasks", f"hf:{files}/gsm.parquet",
            "--question-field", "problem", "--reference-field", "answer", "--category-field", "subject",
            "--scorer", "gsm8k"]
    code, _, err = cli(args, capsys)
    assert code == 0, err
    run = only_run_dir(out)
    rows = run_rows(run)
    assert {r["category"] for r in rows} == {"add", "mul"} and all(r["scorer"] == "gsm8k" for r in rows)
    config = json.loads((run / "manifest.json").read_text())["config"]
    assert config["question_field"] == "problem" and config["tasks"] == [f"hf:{files}/gsm.parquet"]
    code, _, err = cli(["run", "--tasks", "mini", "--category-field", "subject"], capsys)
    assert code == 2 and "--category-field maps the columns of an hf: task" in err
    code, _, err = cli(["run", "--tasks", f"hf:{files}/gsm.parquet", "--question-field", "nope"], capsys)
    assert code == 2 and "no such column" in err and len(err.strip().splitlines()) == 1


def test_training_reads_sharegpt_and_instruction_columns(files):
    from specbench_cli.training.draft_model.distill_data import dataset_rows, load_seeds

    rows = dataset_rows(f"hf:{files}/chat.json", "vicuna")
    assert [(r["instruction"], r["response"]) for r in rows] == [("Hi there", "Hello!"), ("Name a color", "Red.")]
    assert all(r["prompt_template"] == "vicuna" and r["finished"] for r in rows)
    with pytest.raises(UsageError, match="no \\(instruction, response\\) pair"):
        dataset_rows(f"hf:{files}/rows.jsonl")  # prompts only
    seeds = load_seeds(f"hf:{files}/gsm.parquet", limit=2)
    assert [s["instruction"] for s in seeds] == ["What is 2+3?", "What is 7*6?"]


def test_heads_training_takes_a_dataset(files, tiny_model_dir, tmp_path, capsys):
    from helpers.cli import cli

    code, _, err = cli(["train", "heads", "--data", f"hf:{files}/chat.json", "--target", str(tiny_model_dir),
                        "--kind", "medusa", "--heads-count", "1", "--steps", "2", "--batch-size", "2",
                        "--features", str(tmp_path / "f"), "--out", str(tmp_path / "h"), "--threads", "1", "-q"],
                       capsys)
    assert code == 0, err
    assert (tmp_path / "h" / "config.json").is_file()
    assert json.loads((tmp_path / "f" / "features.json").read_text())["prompt_template"] == "auto"


def test_rows_are_capped_and_a_slice_takes_fewer(files, monkeypatch):
    import specbench_cli.tasks.hf as hf

    monkeypatch.setattr(hf, "MAX_ROWS", 3)
    with pytest.raises(UsageError, match=r"4 rows, more than 3; take a slice of a split, e.g\. hf:.*rows\.jsonl::train\[:1000\]"):
        hf_task(f"hf:{files}/rows.jsonl").load()
    assert [q.id for q in hf_task(f"hf:{files}/rows.jsonl::train[:2]").load()] == ["0", "1"]
    assert [q.turns for q in hf_task(f"hf:{files}/saved::train[1:2]").load()] == [["What is 7*6?"]]


def test_columns_are_counted_from_the_header_before_loading(files, monkeypatch):
    import specbench_cli.tasks.hf as hf

    loads = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: loads.append(a))
    monkeypatch.setattr(hf, "MAX_COLUMNS", 2)
    (files / "wide.csv").write_text("a,b,c\n1,2,3\n")
    for name, count in (("gsm.parquet", 3), ("wide.csv", 3)):
        with pytest.raises(UsageError, match=f"{name} has {count} columns, more than 2"):
            hf_task(f"hf:{files}/{name}").load()
    with pytest.raises(UsageError, match="gsm.parquet has 3 columns, more than 2"):
        hf_task(f"hf:{files}").load()  # a folder: every data file in it
    assert loads == []


def test_an_unreachable_hub_is_one_line_at_once(monkeypatch, tmp_path, capsys):
    """A hub id with no network: the local datasets cache only, no retries, one line."""
    import time

    from helpers.cli import cli

    import specbench_cli.models.load

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(specbench_cli.models.load, "hub_reachable", lambda timeout=1.5: False)
    start = time.monotonic()
    code, _, err = cli(["run", "--tasks", "hf:nobody-x/nothing-y"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "not in the local datasets cache and the Hugging Face hub is unreachable" in err
    assert time.monotonic() - start < 5 and "Retry" not in err
