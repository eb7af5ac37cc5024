"""Every bad input a careless or hostile user can give is one `error:` line
naming the file or option, exit 2, and is decided before any model loads.

One table: (command line with {placeholders} for the files below, expected exit code, words the
error line must contain). Every case runs the real `specbench` entry point in-process with
`load_model` (and the training loader) replaced by a function that fails the test, so a case
that only fails after loading a model cannot pass.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from helpers.cli import cli  # the one in-process runner
from helpers.rows import synthetic_rows, write_run

from specbench_cli.cli.main import main


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path):
    """No case may reach the network: the hub is unreachable and its cache empty."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
    """Loading a model is a test failure here: every case must be decided before that."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad-input case")

    import specbench_cli.cli.train.common
    import specbench_cli.models.load

    monkeypatch.setattr(specbench_cli.models.load, "load_model", refuse)
    monkeypatch.setattr(specbench_cli.cli.train.common, "load", refuse)


def _run(folder: Path, rows=None, **edits) -> Path:
    """A synthetic run folder (1 question per Spec-Bench category, ar + pld), manifest edited."""
    write_run(folder, rows if rows is not None else synthetic_rows(seed=1, methods=("pld",), questions_per_category=1))
    doc = json.loads((folder / "manifest.json").read_text())
    doc["config"]["warmup"] = True  # as `specbench run` writes it (test_metrics' manifest has 1)
    for key, value in edits.items():
        if key.startswith("config_"):
            doc["config"][key[len("config_"):]] = value
        else:
            doc[key] = value
    (folder / "manifest.json").write_text(json.dumps(doc))
    return folder


def _baseline(run: Path, out: Path, capsys) -> Path:
    code, _, err = cli(["baseline", str(run), "-o", str(out)], capsys)
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Every bad (and a few good) input files, by placeholder name."""
    d = tmp_path_factory.mktemp("bad")
    f: dict[str, Path] = {}

    def write(name: str, content: str | bytes) -> None:
        f[name] = d / name
        f[name].write_bytes(content if isinstance(content, bytes) else content.encode())

    write("turns_object.jsonl", '{"question_id": 1, "category": "qa", "turns": {"Say hi": "x"}}\n')
    write("turns_int.jsonl", '{"question_id": 1, "category": "qa", "turns": 5}\n')
    write("turns_empty_str.jsonl", '{"question_id": 1, "category": "qa", "turns": [""]}\n')
    write("qid_object.jsonl", '{"question_id": {"a": 1}, "category": "qa", "turns": ["hi"]}\n')
    write("category_list.jsonl", '{"question_id": 1, "category": ["qa"], "turns": ["hi"]}\n')
    write("latin1.jsonl", b'{"question_id": 1, "category": "qa", "turns": ["caf\xe9"]}\n')
    write("array.json", '[{"task_id": "HumanEval/0", "prompt": "def f():\\n"}]\n')
    write("empty.jsonl", "\n\n")
    write("dup_ids.jsonl", '{"question_id": 7, "turns": ["a"]}\n{"question_id": "7", "turns": ["b"]}\n')
    write("a_file", "not a folder\n")
    write("latin1.json", b'{"format": "caf\xe9"}')
    write("grid_latin1.toml", b'methods = ["pld"]\n# caf\xe9\n')
    write("grid_bcs_text.toml", 'methods = ["pld"]\nbcs = "ten"\n')
    write("grid_bad.toml", 'methods = [pld\n')
    write("text_latin1.txt", b"caf\xe9 " * 100)
    base = {"format": "specbench-baseline", "version": 1, "runs": ["r"]}
    entry = {"model": "smollm2-135m", "method_label": "pld", "block_complexity": 8, "category": "qa",
             "mat": 1.5, "speedup": 1.1, "n": 1}
    write("baseline_empty.json", json.dumps({**base, "entries": []}))
    write("baseline_mat_text.json", json.dumps({**base, "entries": [{**entry, "mat": "high"}]}))
    write("baseline_bc_float.json", json.dumps({**base, "entries": [{**entry, "block_complexity": 8.5}]}))
    write("baseline_entry_list.json", json.dumps({**base, "entries": [[1, 2]]}))
    write("baseline_nan.json", json.dumps({**base, "entries": [{**entry, "speedup": float("nan")}]}))
    write("baseline_not.json", json.dumps({"entries": [entry]}))
    write("baseline_other_model.json", json.dumps({**base, "entries": [{**entry, "model": "vicuna-7b"}]}))
    write("baseline_other_bc.json", json.dumps({**base, "entries": [{**entry, "block_complexity": 30}]}))
    f["folder"] = d / "folder"
    f["folder"].mkdir()
    f["run"] = _run(d / "run")
    f["run_config_oops"] = _run(d / "run_config_oops", config="oops")
    f["run_bc_ten"] = _run(d / "run_bc_ten", config_block_complexity="ten")
    f["run_methods_str"] = _run(d / "run_methods_str", config_methods="pld")
    f["run_model_str"] = _run(d / "run_model_str", model="smollm2-135m")
    f["run_params_text"] = _run(d / "run_params_text", model={"name": "m", "params": "135M"})
    f["run_id_list"] = _run(d / "run_id_list", run_id=["a"])
    rows = synthetic_rows(seed=1, methods=("pld",), questions_per_category=1)
    # a damaged row is skipped with a warning (tests/store/test_rows_readable.py); `check` then
    # finds a baseline question the run lacks
    f["rows_turn_text"] = _run(d / "rows_turn_text", rows=rows[:3] + [{**rows[3], "turn": "0"}] + rows[4:])
    f["run_manifest_latin1"] = _run(d / "run_manifest_latin1")
    (f["run_manifest_latin1"] / "manifest.json").write_bytes(b'{"run_id": "caf\xe9"}')
    f["run_manifest_array"] = _run(d / "run_manifest_array")
    (f["run_manifest_array"] / "manifest.json").write_text("[]")
    f["run_samples_latin1"] = _run(d / "run_samples_latin1")
    (f["run_samples_latin1"] / "samples.jsonl").write_bytes(b'{"method": "caf\xe9"}\n{}\n')
    # the same questions, only some categories: a baseline of another suite
    f["run_two_categories"] = _run(d / "run_two_categories", rows=[r for r in rows if r["category"] in ("qa", "rag")])
    # the same suite made with another dtype (recorded in the baseline's settings)
    f["run_bf16"] = _run(d / "run_bf16", config_dtype="bfloat16")
    # the same suite decoded on another forward path (speedups differ between paths)
    f["run_lean"] = _run(d / "run_lean", config_forward="lean")
    _heads_folders(d, f)
    write("garbage.gguf", b"this is not a GGUF file at all\n" * 4)
    write("cut.gguf", b"GGUF\x03\x00\x00\x00" + b"\x00" * 5)
    f["pickled_target"] = d / "pickled_target"
    f["pickled_target"].mkdir()
    (f["pickled_target"] / "config.json").write_text('{"model_type": "llama"}')
    (f["pickled_target"] / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    f["short_ctx"] = d / "short_ctx"  # a model folder whose config declares a 64-token context
    f["short_ctx"].mkdir()
    (f["short_ctx"] / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 64}')
    (f["short_ctx"] / "model.safetensors").write_bytes(b"")
    f["two_layers"] = d / "two_layers"  # a model folder whose config declares 2 layers (EAGLE-3 needs 6)
    f["two_layers"].mkdir()
    (f["two_layers"] / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 2}')
    (f["two_layers"] / "model.safetensors").write_bytes(b"")
    cells = ", ".join(f'"m{i}"' for i in range(40))
    write("grid_huge.toml", f'methods = ["pld"]\nmodels = [{cells}]\nbcs = [{", ".join(map(str, range(1, 41)))}]\n')
    write("grid_repeats.toml", 'methods = ["pld"]\nrepeats = 100000000\n')
    _special_files(d, f)
    _deep_files(d, f, write)
    _templates(write)
    write("wide.csv", ",".join(f"c{i}" for i in range(5000)) + "\n" + ",".join("x" * 5000) + "\n")
    errored = [{**r, "status": "error", "error": "RuntimeError: boom"} for r in rows]
    f["run_all_errors"] = _run(d / "run_all_errors", rows=errored)
    _datastores(d, f)
    return {k: str(v) for k, v in f.items()}


def _special_files(d: Path, f: dict) -> None:
    """FIFOs (reading one blocks until a writer comes) and a character device under every name a
    user could give; each must be refused by its type, before it is opened."""
    import os

    for name in ("fifo.jinja", "fifo.toml", "fifo.jsonl", "fifo.csv", "fifo.json"):
        f[name] = d / name
        os.mkfifo(f[name])
    f["zero.jinja"] = d / "zero.jinja"
    os.symlink("/dev/zero", f["zero.jinja"])
    f["ds_fifo"] = d / "ds_fifo"
    f["ds_fifo"].mkdir()
    os.mkfifo(f["ds_fifo"] / "datastore.json")


def _deep_files(d: Path, f: dict, write) -> None:
    """JSON nested 60,000 levels deep: the JSON reader under `datasets` crashed on it (exit 139)."""
    deep = "[" * 60_000 + "]" * 60_000
    write("deep.jsonl", '{"question": ' + deep + '}\n')
    write("deep.json", deep)
    write("deep_questions.jsonl", '{"question_id": 1, "turns": ' + deep + '}\n')
    write("deep.toml", 'methods = ["pld"]\nbcs = ' + "[" * 5000 + "]" * 5000 + "\n")


def _templates(write) -> None:
    write("syntax.jinja", "{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    write("raise.jinja", "{% if messages[0].role == 'system' %}{{ raise_exception('no system role here') }}{% endif %}")
    write("include.jinja", "{% include 'other.jinja' %}{{ messages[0].content }}")
    write("mro.jinja", "{{ ''.__class__.__mro__[1].__subclasses__() }}")
    write("cycler.jinja", "{{ cycler.__init__.__globals__.os.popen('id').read() }}")
    write("joiner.jinja", "{{ joiner.__init__.__globals__ }}")
    write("lipsum.jinja", "{{ lipsum.__globals__['os'].popen('id').read() }}")
    write("empty.jinja", "")
    write("blank.jinja", "{% for m in messages %}  {% endfor %}\n")
    write("repeat.jinja", "{{ 'a' * 30000000 }}")
    write("long.jinja", "{% for i in range(100000) %}{{ messages[1].content }}{% endfor %}")


def _datastores(d: Path, f: dict) -> None:
    """REST datastores for the default target's 49152-token vocabulary: the index replaced by
    random bytes of the same size (the record intact), and one with a NaN share in it."""
    import random
    import struct

    from specbench_cli.methods.retrieval.datastore import INDEX, write

    class Tok:
        name_or_path = "fake"

        def get_vocab(self):
            return {f"t{i}": i for i in range(49152)}

        def __len__(self):
            return 49152

    rng = random.Random(7)
    seqs = [[rng.randrange(200) for _ in range(rng.randint(3, 30))] for _ in range(40)]
    for name in ("ds_random", "ds_nan"):
        write(seqs, Tok(), d / name, ["random"])
        f[name] = d / name
    index = f["ds_random"] / INDEX
    index.write_bytes(random.Random(3).randbytes(index.stat().st_size))
    raw = bytearray((f["ds_nan"] / INDEX).read_bytes())
    raw[28:32] = struct.pack("<f", float("nan"))  # the first successor's share (trigram layout)
    (f["ds_nan"] / INDEX).write_bytes(bytes(raw))
    # token arrays (samd, suffix) of the right size whose ids leave the vocabulary; no index (rest)
    import numpy as np

    from specbench_cli.methods.retrieval.datastore import TOKENS

    write(seqs, Tok(), d / "ds_tokens", ["random"], index=False)
    f["ds_tokens"] = d / "ds_tokens"
    np.save(f["ds_tokens"] / TOKENS, np.full(sum(map(len, seqs)), 60000, dtype=np.int32))


def _heads_folders(d: Path, f: dict) -> None:
    """Heads folders for a hidden-32 / vocab-128 target: good ones and every way to damage them."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    from specbench_cli.methods.heads.model import EagleHead, eagle_config

    target = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    head = EagleHead(eagle_config(target, 1))
    state = {k: v.contiguous() for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    config = head.config_dict()

    def heads(name: str, cfg_text: str | bytes | None = None, tensors: dict | None = None, raw: bytes | None = None):
        folder = d / name
        folder.mkdir()
        text = json.dumps(config) if cfg_text is None else cfg_text
        (folder / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())
        if raw is not None:
            (folder / "model.safetensors").write_bytes(raw)
        else:
            save_file(tensors if tensors is not None else state, str(folder / "model.safetensors"))
        f[name] = folder

    heads("heads_list", "[]")
    heads("heads_string", '"eagle"')
    heads("heads_latin1", b'{"num_hidden_layers": 1, "x": "caf\xe9"}')
    heads("heads_typed", json.dumps({**config, "hidden_size": "32"}))
    buf = __import__("io").BytesIO()
    torch.save(state, buf)
    heads("heads_pickle", raw=buf.getvalue())
    heads("heads_shape", tensors={**state, "fc.weight": torch.zeros(32, 32)})
    heads("heads_missing", tensors={k: v for k, v in state.items() if k != "fc.weight"})
    heads("heads_cut", raw=(d / "heads_list" / "model.safetensors").read_bytes()[:-40])
    heads("heads_good")  # made for a hidden-32 / vocab-128 target, not the default one
    heads("heads_vocab_huge", json.dumps({**config, "vocab_size": 10 ** 15}))


@pytest.fixture(scope="module")
def baselines(files, tmp_path_factory) -> dict[str, str]:
    """Baselines written by `specbench baseline` from the runs above."""
    d = tmp_path_factory.mktemp("baselines")
    out = {}
    for name in ("run", "run_two_categories", "run_bf16"):
        target = d / f"{name}.json"
        old = sys.argv
        sys.argv = ["specbench", "baseline", files[name], "-o", str(target)]
        try:
            main()
        except SystemExit as e:
            assert not e.code
        finally:
            sys.argv = old
        out[f"baseline_of_{name}"] = str(target)
    return out


# (command, exit code, words the one error line must contain). {name} = a path from `files`.
CASES = [
    # --- run: question files
    ("run --tasks jsonl --questions {turns_object.jsonl}", 2, "{turns_object.jsonl}:1: 'turns' must be a non-empty list"),
    ("run --tasks jsonl --questions {turns_int.jsonl}", 2, "{turns_int.jsonl}:1: 'turns' must be a non-empty list"),
    ("run --tasks jsonl --questions {turns_empty_str.jsonl}", 2, "'turns' must be a non-empty list of non-empty"),
    ("run --tasks jsonl --questions {qid_object.jsonl}", 2, "{qid_object.jsonl}:1: 'question_id' must be"),
    ("run --tasks jsonl --questions {category_list.jsonl}", 2, "{category_list.jsonl}:1: 'category' must be"),
    ("run --tasks jsonl --questions {latin1.jsonl}", 2, "{latin1.jsonl}:1: not UTF-8 text"),
    ("run --tasks spec_bench --questions {latin1.jsonl}", 2, "{latin1.jsonl}:1: not UTF-8 text"),
    ("run --tasks jsonl --questions {array.json}", 2, "{array.json}:1: expected a JSON object, got list"),
    ("run --tasks humaneval --questions {array.json}", 2, "{array.json}:1: not a HumanEval problem"),
    ("run --tasks humaneval --questions {latin1.jsonl}", 2, "{latin1.jsonl}:1: not UTF-8 text"),
    ("run --tasks jsonl --questions {empty.jsonl}", 2, "{empty.jsonl}: no questions in file"),
    ("run --tasks jsonl --questions {folder}", 2, "questions file not found: {folder}"),
    ("run --tasks jsonl", 2, "task 'jsonl' needs --questions PATH"),
    ("run --tasks jsonl --questions {dup_ids.jsonl}", 2, "{dup_ids.jsonl}:2: question_id '7' repeats the one on line 1"),
    ("run --tasks mini --questions {dup_ids.jsonl}", 2, "is not read by --tasks mini"),
    ("run --resume {folder} --heads h", 2, "--heads cannot change a resumed run"),
    # --- run: options
    ("run --device cpu:abc", 2, "--device 'cpu:abc'"),
    ("run --device gpu", 2, "unknown device 'gpu'"),
    ("run --temperature nan", 2, "--temperature must be a finite number >= 0 (got nan)"),
    ("run --temperature inf", 2, "--temperature must be a finite number >= 0 (got inf)"),
    ("run --top-p nan", 2, "--top-p must be a finite number >= 0 (got nan)"),
    ("run --repeats 0", 2, "--repeats must be between 1 and 10000 (got 0)"),
    ("run --threads 0", 2, "--threads must be between 1 and 4096 (got 0)"),
    ("run --batch-size 0", 2, "--batch-size must be between 1 and 256 (got 0)"),
    ("run --batch-size 257", 2, "--batch-size must be between 1 and 256 (got 257)"),
    ("run --kernels cublas", 2, "unknown kernels 'cublas'"),
    ("run --max-new-tokens 0", 2, "--max-new-tokens must be between 1 and 1000000"),
    ("run --limit 0", 2, "--limit must be at least 1"),
    ("run --question-ids 999999", 2, "question ids not found: 999999"),
    ("run --categories qaa", 2, "unknown category 'qaa'"),
    ("run --methods ar,pld --option lookahead.W=5", 2, "options given for method 'lookahead'"),
    ("run --output-dir {a_file}", 2, "--output-dir {a_file} is a file, not a folder"),
    ("run --output-dir {a_file}/sub", 2, "--output-dir {a_file}/sub: cannot create it ({a_file} is a file)"),
    ("run --retry-errors", 2, "--retry-errors needs --resume RUN_DIR"),
    ("run --methods recycling -o recycling.k=0", 2, "recycling.k must be between 1 and 64 (got 0)"),
    ("run --methods recycling -o recycling.tree={latin1.jsonl}", 2, "recycling.tree: {latin1.jsonl} is not a JSON file"),
    ("run --methods recycling -o recycling.order=widest", 2, "recycling.order must be one of prior, bfs"),
    ("run --methods samd -o samd.fallback=eagle2", 2, "samd.fallback must be one of recycling, pld, dflash, eagle, eagle3, hydra, medusa, none"),
    ("run --methods samd -o samd.threshold=0", 2, "samd.threshold must be between 1 and 1024 (got 0)"),
    ("run --methods suffix -o suffix.max_tree_depth=0", 2, "suffix.max_tree_depth must be between 1 and 512 (got 0)"),
    ("run --methods suffix -o suffix.min_token_prob=2", 2, "suffix.min_token_prob must be between 0.0 and 1.0 (got 2.0)"),
    ("run --methods suffix -o suffix.fallback=hydra", 2, "suffix.fallback=hydra drafts from trained heads: pass -o suffix.heads=DIR"),
    ("run --methods suffix -o suffix.fallback=pld -o suffix.heads={folder}", 2, "suffix.heads is for a head fallback"),
    # --- run --resume: the manifest, and flags that contradict it
    ("run --resume {folder}", 2, "is not a run folder (no manifest.json)"),
    ("run --resume {run_config_oops}", 2, "{run_config_oops}/manifest.json: 'config' must be an object"),
    ("run --resume {run_bc_ten}", 2, "{run_bc_ten}/manifest.json: 'config.block_complexity' must be a whole number, 'auto' or 'adaptive'"),
    ("run --resume {run_methods_str}", 2, "'config.methods' must be"),
    ("run --resume {run_model_str}", 2, "{run_model_str}/manifest.json: 'model' must be an object"),
    ("run --resume {run_manifest_latin1}", 2, "{run_manifest_latin1}/manifest.json: not valid JSON"),
    ("run --resume {run} --bc 30", 2, "--block-complexity 30 (manifest: 8) contradict"),
    ("run --resume {run} --methods ar,lookahead", 2, "--methods ar,lookahead (manifest: ar,pld,sps)"),
    ("run --resume {run} --max-new-tokens 5 --dtype bfloat16", 2,
     "--max-new-tokens 5 (manifest: 128); --dtype bfloat16 (manifest: float32)"),
    ("run --resume {run} --model other-model", 2, "--model other-model (manifest: smollm2-135m)"),
    ("run --resume {run} --no-warmup", 2, "--no-warmup (manifest: warmup=True)"),
    # --- report / compare / export / baseline: run folders
    ("report {a_file}", 2, "run folder not found: {a_file}"),
    ("report {folder}", 2, "missing manifest.json in {folder}"),
    ("report {run_manifest_latin1}", 2, "{run_manifest_latin1}/manifest.json: not valid JSON"),
    ("report {run_manifest_array}", 2, "{run_manifest_array}/manifest.json: expected a JSON object"),
    ("report {run_model_str}", 2, "'model' must be an object"),
    ("report {run_params_text}", 2, "'model.params' must be an integer"),
    ("report {run_id_list}", 2, "'run_id' must be a non-empty string"),
    ("report {run_samples_latin1}", 2, "no readable row in {run_samples_latin1}: every line of samples.jsonl"),
    ("report {run} --format xml", 2, "unknown format 'xml'"),
    ("report {run} -o {a_file}", 2, "--output {a_file} is a file, not a folder"),
    ("report {run} --columns nonsense --no-plots", 2, "nonsense"),
    ("compare {run} {folder}", 2, "missing manifest.json in {folder}"),
    ("export {run} -o {a_file}", 2, "--output {a_file} is a file, not a folder"),
    ("export {run} -o {folder} --format csv", 2, "unknown export format 'csv'"),
    ("baseline {run} -o {folder}", 2, "--output {folder} is a folder; give a file path"),
    ("baseline {run} -o {a_file}/x.json", 2, "--output {a_file} is a file, not a folder"),
    ("export {run} -o {a_file}/sub/answers", 2, "--output {a_file}/sub/answers: cannot create it ({a_file} is a file)"),
    # --- check: baselines and tolerances
    ("check {run} --baseline {baseline_empty.json}", 2, "{baseline_empty.json}: the baseline has no entries"),
    ("check {run} --baseline {baseline_mat_text.json}", 2, "{baseline_mat_text.json}: entry 0: 'mat' must be a finite"),
    ("check {run} --baseline {baseline_bc_float.json}", 2, "entry 0: 'block_complexity' must be an integer"),
    ("check {run} --baseline {baseline_entry_list.json}", 2, "entry 0 must be an object"),
    ("check {run} --baseline {baseline_nan.json}", 2, "entry 0: 'speedup' must be a finite number > 0 or null, got NaN"),
    ("check {run} --baseline {baseline_not.json}", 2, "not a specbench baseline"),
    ("check {run} --baseline {latin1.json}", 2, "{latin1.json}: not valid JSON"),
    ("check {run} --baseline {folder}", 2, "baseline file not found"),
    ("check {run} --baseline {baseline_other_model.json}", 2, "model: baseline vicuna-7b, run smollm2-135m"),
    ("check {run} --baseline {baseline_other_bc.json}", 2, "block_complexity: baseline 30, run 8"),
    ("check {run} --baseline {baseline_of_run_two_categories}", 2,
     "categories: baseline qa,rag, run math_reasoning,mt_bench,qa,rag,summarization,translation"),
    ("check {run} --baseline {baseline_of_run_bf16}", 2, 'dtype: baseline "bfloat16", run "float32"'),
    ("check {run_lean} --baseline {baseline_of_run}", 2, 'forward: baseline "sdpa", run "lean"'),
    ("check {run} --baseline {baseline_of_run} --mat-tol nan", 2, "--mat-tol must be a finite number >= 0 (got nan)"),
    ("check {run} --baseline {baseline_of_run} --speedup-tol -1", 2, "--speedup-tol must be a finite number >= 0"),
    ("check {run} --baseline {baseline_of_run} --mat-tol inf", 2, "--mat-tol must be a finite number"),
    ("check {rows_turn_text} --baseline {baseline_of_run}", 2, "only 5 of the baseline's 6 questions pair with the run"),
    # --- sweep grids
    ("sweep {grid_latin1.toml} --dry-run", 2, "{grid_latin1.toml}: cannot read"),
    ("sweep {grid_bcs_text.toml} --dry-run", 2, "{grid_bcs_text.toml}: 'bcs' must be a non-empty list"),
    ("sweep {grid_bad.toml} --dry-run", 2, "{grid_bad.toml}: not valid TOML"),
    ("sweep {folder}/none.toml --dry-run", 2, "grid file not found"),
    ("sweep {grid_bcs_text.toml} --jobs 0", 2, "--jobs must be at least 1"),
    # --- cost
    ("cost --max-q 0", 2, "--max-q must be between 1 and 1024"),
    ("cost --device cpu:abc", 2, "--device 'cpu:abc'"),
    ("cost --dtype float8", 2, "unknown dtype 'float8'"),
    ("cost --threads 0", 2, "--threads must be at least 1"),
    ("cost --batch-size 0", 2, "--batch-size must be between 1 and 256"),
    ("cost --kernels packed", 2, "unknown kernels 'packed'"),
    ("cost --json {folder}", 2, "is a folder, not a file"),
    # --- train
    ("train drafter finetune --drafter d --data {latin1.jsonl} -o {folder}/ft", 2, "{latin1.jsonl}:1: not UTF-8 text"),
    ("train drafter finetune --drafter d --data {array.json} -o {folder}/ft", 2, "expected a JSON object, got list"),
    ("train drafter finetune --drafter d --data {turns_int.jsonl} -o {folder}/ft --lr nan", 2, "--lr must be a finite number >= 0 (got nan)"),
    ("train drafter finetune --drafter d --data {turns_int.jsonl} -o {folder}/ft --grad-clip nan", 2,
     "--grad-clip must be a finite number >= 0 (got nan)"),
    ("train drafter finetune --drafter d --data {turns_int.jsonl} -o {a_file}", 2, "exists and is not a folder"),
    ("train drafter scratch --text {text_latin1.txt} -o {folder}/sc", 2, "is not UTF-8 text"),
    ("train drafter distill-data -o {folder}", 2, "is a folder"),
    ("train drafter distill-data -o {folder}/d.jsonl --seeds {latin1.jsonl}", 2, "{latin1.jsonl}:1: not UTF-8 text"),
    ("train drafter distill-data -o {folder}/d.jsonl --temperatures x", 2, "--temperatures must be"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --kind nope", 2, "nope"),
    ("train heads --data {latin1.jsonl} -o {a_file}", 2, "--out: {a_file} exists and is not a folder"),
    ("train heads --data {latin1.jsonl} -o {a_file}/h", 2, "is a file, so nothing can be written under it"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --lr inf", 2, "--lr must be a finite number >= 0 (got inf)"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --lambda inf", 2, "--lambda must be a finite number"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --lambda nan", 2, "--lambda must be a finite number"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --steps -3", 2, "--steps must be a finite number >= 0"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --kind eagle3 --ttt-steps 0", 2, "--ttt-steps must be >= 1"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --kind eagle3 --draft-vocab 0", 2, "--draft-vocab must be >= 1"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --kind eagle3 --feature-layers 2,x,5", 2,
     "--feature-layers must be three layer indices"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --kind eagle3 --target {two_layers}", 2,
     "the target has only 2 layers; pass --feature-layers"),
    ("train heads --data {latin1.jsonl} -o {folder}/h --kind hydra --hydra-arch cross-attn", 2,
     "--hydra-arch must be one of prefix-mlp, mlp"),
    ("train sft --data {latin1.jsonl} -o {folder}/s --lr inf", 2, "--lr must be a finite number >= 0 (got inf)"),
    # --- bounds: every number has a ceiling, checked before any model loads
    ("run --methods jacobi --bc 1000000000", 2, "--block-complexity must be between 1 and 4096"),
    ("run --methods lookahead --bc 1000000000", 2, "--block-complexity must be between 1 and 4096"),
    ("run --max-new-tokens 1000000000000000000000000000000", 2, "--max-new-tokens must be between 1 and 1000000"),
    ("run --methods pld --max-new-tokens 9000", 2, "exceed smollm2-135m's context of 8192 tokens"),
    ("run --methods pld --model {short_ctx} --bc 64", 2, "block complexity 64 does not fit"),
    ("run --methods pld --model {short_ctx} --max-new-tokens 60", 2, "use at most --max-new-tokens 53"),
    ("run --methods pld -o pld.num_pred_tokens=-5", 2, "option pld.num_pred_tokens must be between 1 and 4096"),
    ("run --methods mask-probe -o mask-probe.steps=-3", 2, "option mask-probe.steps must be between 1 and 64"),
    ("run --methods mask-probe -o mask-probe.ema=nan", 2, "option mask-probe.ema expects a finite number"),
    ("run --methods lookahead -o lookahead.N=100000", 2, "option lookahead.N must be between 2 and 64"),
    ("run --threads 100000000", 2, "--threads must be between 1 and 4096"),
    ("sweep {grid_huge.toml} --dry-run", 2, "the grid expands to 9600 jobs, more than --max-jobs 1000"),
    ("sweep {grid_huge.toml} --dry-run --max-jobs 0", 2, "--max-jobs must be at least 1"),
    # --- files that are not what they claim: recognised by their bytes, before the target loads
    ("run --methods eagle --heads {heads_list}", 2, "config.json must hold a JSON object, not list"),
    ("run --methods eagle --heads {heads_string}", 2, "config.json must hold a JSON object, not str"),
    ("run --methods eagle --heads {heads_latin1}", 2, "config.json is not UTF-8 text"),
    ("run --methods eagle --heads {heads_typed}", 2, "'hidden_size' must be a positive int, got \"32\""),
    ("run --methods eagle --heads {heads_pickle}", 2, "model.safetensors is a PyTorch pickle, not safetensors"),
    ("run --methods eagle --heads {heads_shape}", 2, "tensor 'fc.weight' has shape [32, 32], expected [32, 64]"),
    ("run --methods eagle --heads {heads_missing}", 2, "missing tensor 'fc.weight'"),
    ("run --methods eagle --heads {heads_cut}", 2, "(truncated or damaged)"),
    ("run --methods eagle --heads {folder}/nothing", 2, "heads folder not found"),
    ("run --methods sps --draft-model {folder}/nonexistent", 2, "model path not found"),
    ("run --methods sps --draft-model {garbage.gguf}", 2, "is not a GGUF file"),
    ("run --model {garbage.gguf}", 2, "garbage.gguf is not a GGUF file"),
    ("run --model {cut.gguf}", 2, "the GGUF header is cut short"),
    ("run --model {pickled_target}", 2, "holds only pickled weights (pytorch_model.bin)"),
    ("cost --plot {a_file}/x.png", 2, "--plot: "),
    ("cost --plot {folder}", 2, "is a folder, not a file"),
    # --- special files: refused by type before they are opened (a FIFO would block forever)
    ("run --prompt-template {fifo.jinja}", 2, "{fifo.jinja} is a FIFO (named pipe), not a regular file"),
    ("run --prompt-template {zero.jinja}", 2, "{zero.jinja} is a character device, not a regular file"),
    ("sweep {fifo.toml} --dry-run", 2, "grid file {fifo.toml} is a FIFO (named pipe)"),
    ("run --tasks jsonl --questions {fifo.jsonl}", 2, "{fifo.jsonl} is a FIFO (named pipe)"),
    ("run --tasks hf:{fifo.csv}", 2, "{fifo.csv} is a FIFO (named pipe)"),
    ("run --methods rest -o rest.datastore={ds_fifo}", 2, "datastore.json is a FIFO (named pipe)"),
    ("check {run} --baseline {fifo.json}", 2, "{fifo.json} is a FIFO (named pipe)"),
    # --- JSON nested 60,000 deep: bounded for every reader, hf: included (it crashed with exit 139)
    ("run --tasks hf:{deep.jsonl}", 2, "{deep.jsonl} nests JSON deeper than 100 levels"),
    ("run --tasks hf:{deep.json}", 2, "{deep.json} nests JSON deeper than 100 levels"),
    ("run --tasks jsonl --questions {deep_questions.jsonl}", 2, "{deep_questions.jsonl}:1: not valid JSON (nested deeper"),
    ("check {run} --baseline {deep.json}", 2, "{deep.json}: not valid JSON (nested deeper than 100 levels)"),
    ("sweep {deep.toml} --dry-run", 2, "{deep.toml}: not valid TOML (nested deeper than 100 levels)"),
    # --- prompt templates: parsed and rendered on a sample conversation before the model loads
    ("run --prompt-template {syntax.jinja}", 2, "--prompt-template {syntax.jinja}:2: syntax error"),
    ("run --prompt-template {raise.jinja}", 2, "TemplateError: no system role here"),
    ("run --prompt-template {include.jinja}", 2, "no loader for this environment specified"),
    ("run --prompt-template {mro.jinja}", 2, "SecurityError"),
    ("run --prompt-template {cycler.jinja}", 2, "SecurityError"),
    ("run --prompt-template {joiner.jinja}", 2, "SecurityError"),
    ("run --prompt-template {lipsum.jinja}", 2, "SecurityError"),
    ("run --prompt-template {empty.jinja}", 2, "renders an empty prompt for a sample conversation"),
    ("run --prompt-template {blank.jinja}", 2, "renders an empty prompt for a sample conversation"),
    ("run --prompt-template {repeat.jinja}", 2, "a repetition longer than 100000 characters"),
    ("run --prompt-template {long.jinja}", 2, "renders more than 100000 characters"),
    ("train drafter distill-data -o {folder}/d.jsonl --prompt-template {empty.jinja}", 2, "renders an empty prompt"),
    # --- the drafter is resolved before the target loads (here: a hub id, no hub, empty cache)
    ("run --methods sps --draft-model abc", 2, "draft model 'abc' is not in the local Hugging Face cache"),
    ("run --methods sps -o sps.draft_model=abc", 2, "draft model 'abc' is not in the local Hugging Face cache"),
    # --- head configs' sizes: ceilings, and against the target's header
    ("run --methods eagle --heads {heads_vocab_huge}", 2, "'vocab_size' is 1000000000000000, more than any model has"),
    ("run --methods eagle --heads {heads_good}", 2, "'hidden_size' is 32, the target 'smollm2-135m' declares 576"),
    # --- integers bounded to their machine type; empty values refused
    ("run --methods mask-probe -o mask-probe.seed=99999999999999999999999", 2,
     "option mask-probe.seed must be a 64-bit integer"),
    ("run --seed 99999999999999999999999", 2, "--seed must be an integer between"),
    ("run --methods recycling -o recycling.tree=", 2, "--option recycling.tree=: no value after '='"),
    ("run --methods samd -o samd.heads=", 2, "--option samd.heads=: no value after '='"),
    # --- nothing to export is not a success
    ("export {run_all_errors} -o {folder}/exported", 2, "nothing to export: all 12 question(s) have an errored"),
    # --- sizes: columns, the hub without a network, the job cap itself, the repeats bound
    ("run --tasks hf:{wide.csv}", 2, "{wide.csv} has 5000 columns, more than 4096"),
    ("run --tasks hf:nobody-x/nothing-y", 2, "nobody-x/nothing-y is not in the local datasets cache and the Hugging Face hub is unreachable"),
    ("sweep {grid_huge.toml} --dry-run --max-jobs 100000000000", 2, "--max-jobs must be at most 100000"),
    ("sweep {grid_repeats.toml} --dry-run", 2, "'repeats' must be an integer between 1 and 10000"),
    # --- a damaged REST index never reaches draftretriever (which aborts the process on one)
    ("run --methods rest -o rest.datastore={ds_random}", 2, "datastore.idx is damaged"),
    ("run --methods rest -o rest.datastore={ds_nan}", 2, "datastore.idx is damaged (a successor's share is not a number"),
    # --- the token arrays samd's static automaton and suffix's global tree read
    ("run --methods samd -o samd.datastore={ds_tokens}", 2, "a token id is outside the 49152-token vocabulary"),
    ("run --methods suffix -o suffix.datastore={ds_tokens}", 2, "a token id is outside the 49152-token vocabulary"),
    ("run --methods samd -o samd.datastore={ds_fifo}", 2, "datastore.json is a FIFO (named pipe)"),
    ("run --methods rest -o rest.datastore={ds_tokens}", 2, "was built without draftretriever's index"),
]


@pytest.mark.parametrize("command,code,message", CASES, ids=[c[0][:70] for c in CASES])
def test_bad_input_is_one_line_naming_it(command, code, message, files, baselines, capsys):
    paths = {**files, **baselines}
    fill = lambda text: re.sub(r"\{([^{}]+)\}", lambda m: paths[m.group(1)], text)  # noqa: E731
    args = [fill(part) for part in command.split()]
    got, out, err = cli(args, capsys)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("note:", "warning:"))]
    assert got == code, f"exit {got}\nstdout: {out}\nstderr: {err}"
    assert "Traceback" not in err + out
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert fill(message) in lines[0]


def test_the_table_covers_every_command():
    """Every command with user input has cases above (a new command must add its own)."""
    covered = {c[0].split()[0] for c in CASES}
    assert covered >= {"run", "report", "compare", "export", "baseline", "check", "sweep", "cost", "train"}


def test_a_runtime_failure_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    """Not bad input but a failure while running (here: the Spec-Bench download): exit 1, one line."""
    import specbench_cli.tasks.spec_bench as sb

    monkeypatch.setattr(sb, "local_candidates", lambda: [])
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECBENCH_QUESTIONS_URL", (tmp_path / "nowhere.jsonl").as_uri())
    code, _, err = cli(["run", "--tasks", "spec_bench"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: could not download Spec-Bench questions")
    assert not (tmp_path / "cache" / "data" / "spec_bench" / "question.jsonl").exists()
