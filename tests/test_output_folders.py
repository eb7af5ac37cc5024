"""Output folders hold what their command writes, and nothing else is removed or written through.

Every command with an output folder (`heads import`, `datastore build`, the `train` commands)
refuses an existing folder of other files, with or without --force (one line, exit 2, before any
model loads), refuses a symbolic link given as the folder, and with --force removes only the
names it writes: a link planted at one of them is unlinked, the file it names untouched. The
study scripts under results/reference write through `atomic_write` (a planted link is replaced).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import torch
from helpers.cli import cli
from helpers.victims import untouched, victim

from specbench_cli.atomic import (
    OutputFolder,
    clear_output,
    install_folder,
    output_folder_problem,
    write_staged,
)

ROOT = Path(__file__).resolve().parents[1]
SPEC = OutputFolder("demo", "a demo output", "done.json", ("done.json", "data.bin", "model-*.bin", "checkpoints/step-*"))


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ----------------------------------------------------------------------------- the shared helper

def test_a_folder_of_other_files_is_refused_even_with_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "data.bin").write_text("demo's")
    for force in (False, True):
        problem = output_folder_problem(out, SPEC, force)
        assert problem is not None and "notes.txt" in problem and "does not write" in problem
    assert (out / "notes.txt").read_text() == "mine"


def test_missing_empty_unfinished_finished_and_replaced(tmp_path):
    out = tmp_path / "out"
    assert output_folder_problem(out, SPEC) is None
    out.mkdir()
    assert output_folder_problem(out, SPEC) is None
    (out / "data.bin").write_text("x")
    assert "unfinished a demo output (no done.json)" in output_folder_problem(out, SPEC)
    (out / "done.json").write_text("{}")
    assert "already holds a demo output; pass --force" in output_folder_problem(out, SPEC)
    assert output_folder_problem(out, SPEC, force=True) is None


def test_a_link_as_the_folder_is_refused_with_or_without_force(tmp_path):
    _, folder = victim(tmp_path)
    link = tmp_path / "out"
    link.symlink_to(folder, target_is_directory=True)
    for force in (False, True):
        assert "is a symbolic link" in output_folder_problem(link, SPEC, force)


def test_clear_removes_only_own_names_and_links_as_links(tmp_path):
    file, folder = victim(tmp_path)
    out = tmp_path / "out"
    (out / "checkpoints" / "step-0000001").mkdir(parents=True)
    (out / "checkpoints" / "step-0000001" / "w.bin").write_text("x")
    (out / "checkpoints" / "step-0000002.tmp").symlink_to(folder, target_is_directory=True)
    (out / "checkpoints" / "other").mkdir()  # not a name the command writes there: stays
    (out / "model-1.bin").symlink_to(file)
    (out / "done.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    assert "checkpoints, notes.txt" in output_folder_problem(out, SPEC, force=True)  # both hold others' files
    left = clear_output(out, SPEC)
    assert left == ["checkpoints", "notes.txt"]  # a folder of its own holding another's entry is left whole
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["other", "step-0000001", "step-0000002.tmp"]
    (out / "checkpoints" / "other").rmdir()
    assert clear_output(out, SPEC) == ["notes.txt"]  # now all its own: removed entry by entry, links as links
    assert untouched(file, folder)


def test_install_refuses_other_files_and_links_and_changes_nothing(tmp_path):
    file, folder = victim(tmp_path)
    new = tmp_path / "new"
    new.mkdir()
    (new / "done.json").write_text("new")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        install_folder(new, out, SPEC)
    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    with pytest.raises(FileExistsError, match="symbolic link"):
        install_folder(new, link, SPEC)
    assert (out / "notes.txt").read_text() == "mine" and (new / "done.json").exists() and untouched(file, folder)
    old = tmp_path / "old"
    old.mkdir()
    (old / "data.bin").symlink_to(file)  # an earlier output with a link planted at one of its names
    install_folder(new, old, SPEC)
    assert sorted(p.name for p in old.iterdir()) == ["done.json"] and untouched(file, folder)


def test_write_staged_replaces_a_planted_link(tmp_path):
    file, folder = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").symlink_to(file)
    write_staged(out, lambda stage: (stage / "config.json").write_text("new"))
    assert not (out / "config.json").is_symlink() and (out / "config.json").read_text() == "new"
    assert sorted(p.name for p in out.iterdir()) == ["config.json"] and untouched(file, folder)


# ----------------------------------------------------------------------------- heads import

def _published_medusa(folder: Path, hidden: int = 32, vocab: int = 128, heads: int = 2) -> Path:
    """A Medusa-1 folder as FasterDecoding publishes it (random finite weights)."""
    torch.manual_seed(0)
    state = {}
    for i in range(heads):
        state[f"{i}.0.linear.weight"] = torch.randn(hidden, hidden) * 0.02
        state[f"{i}.0.linear.bias"] = torch.zeros(hidden)
        state[f"{i}.1.weight"] = torch.randn(vocab, hidden) * 0.02
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"medusa_num_heads": heads, "medusa_num_layers": 1}))
    torch.save(state, folder / "medusa_lm_head.pt")
    return folder


@pytest.mark.parametrize("force", [False, True])
def test_heads_import_never_replaces_a_folder_of_other_files(tmp_path, capsys, force):
    src = _published_medusa(tmp_path / "src")
    out = tmp_path / "Documents"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    code, _, err = cli(["heads", "import", str(src), "--out", str(out), *(["--force"] if force else [])], capsys)
    line = _one_error_line(err)
    assert code == 2 and "thesis.tex" in line and "does not write" in line
    assert [p.name for p in out.iterdir()] == ["thesis.tex"] and (out / "thesis.tex").read_text() == "years of work"


def test_heads_import_refuses_a_link_as_out(tmp_path, capsys):
    src = _published_medusa(tmp_path / "src")
    file, folder = victim(tmp_path)
    link = tmp_path / "heads"
    link.symlink_to(folder, target_is_directory=True)
    for extra in ([], ["--force"]):
        code, _, err = cli(["heads", "import", str(src), "--out", str(link), *extra], capsys)
        assert code == 2 and "symbolic link" in _one_error_line(err)
    assert link.is_symlink() and untouched(file, folder)


def test_heads_import_force_replaces_its_own_files_only_and_unlinks_links(tmp_path, capsys):
    src = _published_medusa(tmp_path / "src")
    out = tmp_path / "heads"
    code, _, err = cli(["heads", "import", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    file, folder = victim(tmp_path)
    weights = next(p for p in out.iterdir() if p.suffix == ".safetensors")
    weights.unlink()
    weights.symlink_to(file)  # planted at one of the folder's own names
    code, _, err = cli(["heads", "import", str(src), "--out", str(out)], capsys)
    assert code == 2 and "--force" in _one_error_line(err)
    code, _, err = cli(["heads", "import", str(src), "--out", str(out), "--force"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == names and not weights.is_symlink()
    assert untouched(file, folder)


# ----------------------------------------------------------------------------- datastore build

def _corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("the cat sat on the mat", "one two three")))
    return corpus


@pytest.mark.parametrize("force", [False, True])
def test_datastore_build_never_replaces_a_folder_of_other_files(tmp_path, capsys, force):
    out = tmp_path / "Documents"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    # the model does not exist: the refusal comes first, before anything loads
    code, _, err = cli(["datastore", "build", "--from", str(_corpus(tmp_path)), "--out", str(out), "--model",
                        str(tmp_path / "no-model"), *(["--force"] if force else [])], capsys)
    line = _one_error_line(err)
    assert code == 2 and "thesis.tex" in line and "does not write" in line
    assert [p.name for p in out.iterdir()] == ["thesis.tex"] and (out / "thesis.tex").read_text() == "years of work"


def test_datastore_build_refuses_a_link_as_out(tmp_path, capsys):
    file, folder = victim(tmp_path)
    link = tmp_path / "ds"
    link.symlink_to(folder, target_is_directory=True)
    code, _, err = cli(["datastore", "build", "--from", str(_corpus(tmp_path)), "--out", str(link), "--force",
                        "--model", str(tmp_path / "no-model")], capsys)
    assert code == 2 and "symbolic link" in _one_error_line(err)
    assert link.is_symlink() and untouched(file, folder)


def test_datastore_force_replaces_its_own_files_and_unlinks_a_planted_link(tiny_model_dir, tmp_path, capsys):
    from specbench_cli.methods.retrieval import datastore as store

    out = tmp_path / "ds"
    args = ["datastore", "build", "--from", str(_corpus(tmp_path)), "--out", str(out), "--model", str(tiny_model_dir)]
    code, _, err = cli(args, capsys)
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    file, folder = victim(tmp_path)
    (out / store.TOKENS).unlink()
    (out / store.TOKENS).symlink_to(file)
    code, _, err = cli([*args, "--force"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == names and not (out / store.TOKENS).is_symlink()
    assert store.read_meta(out)["entries"] == 2 and untouched(file, folder)


# ----------------------------------------------------------------------------- training commands

def _train(args: list, capsys) -> tuple[int, str]:
    """`specbench train ARGS` in-process: (exit code, stderr)."""
    code, _, err = cli(["train", *map(str, args)], capsys)
    return code, err


def _scratch(text: Path, out: Path, *extra) -> list:
    return ["drafter", "scratch", "--text", text, "-o", out, "--tokenizer-from", "TOKENIZER", "--layers", 1,
            "--hidden", 32, "--heads", 2, "--seq-len", 8, "--batch-size", 2, "--quiet", *extra]


@pytest.mark.parametrize("command", [
    lambda out: _scratch(Path("text.txt"), out),
    lambda out: ["drafter", "subclone", "--target", "no-model", "-o", out],
    lambda out: ["drafter", "finetune", "--drafter", "no-model", "--data", "d.jsonl", "-o", out],
    lambda out: ["sft", "--data", "d.jsonl", "-o", out],
    lambda out: ["msn", "--data", "d.jsonl", "-o", out],
    lambda out: ["space", "--data", "d.jsonl", "-o", out],
    lambda out: ["pard", "--drafter", "no-model", "--data", "d.jsonl", "-o", out],
    lambda out: ["heads", "--data", "d.jsonl", "--out", out],
], ids=["scratch", "subclone", "finetune", "sft", "msn", "space", "pard", "heads"])
def test_every_trainer_refuses_a_folder_of_other_files_and_a_link(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    Path("text.txt").write_text("the cat sat on the mat " * 20)
    Path("d.jsonl").write_text(json.dumps({"instruction": "hi", "response": "the cat", "target": "x"}) + "\n")
    out = tmp_path / "Documents"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    file, folder = victim(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    for target, extra, why in ((out, [], "does not write"), (out, ["--force"], "does not write"),
                               (link, [], "symbolic link"), (link, ["--force"], "symbolic link")):
        code, err = _train(command(target) + extra, capsys)
        assert code == 2 and why in _one_error_line(err)  # refused before any model or data loads
    assert [p.name for p in out.iterdir()] == ["thesis.tex"] and untouched(file, folder)


def test_scratch_force_over_planted_checkpoint_links_writes_none_through_them(tmp_path, tiny_model_dir, capsys):
    """A link planted where a checkpoint is written (`step-0000001.tmp`) and one at a name the
    rotation would remove: with --force both are unlinked, the run writes real checkpoints,
    `--keep 1` rotates without following or failing, and the links' folder is untouched."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat and the dog sat on the log " * 10)
    file, folder = victim(tmp_path)
    out = tmp_path / "drafter"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "step-0000001.tmp").symlink_to(folder, target_is_directory=True)
    (out / "checkpoints" / "step-0000002").symlink_to(folder, target_is_directory=True)
    (out / "config.json").symlink_to(file)
    args = [a if a != "TOKENIZER" else tiny_model_dir for a in _scratch(text, out, "--steps", 2, "--save-every", 1,
                                                                        "--keep", 1)]
    code, err = _train(args, capsys)
    assert code == 2 and "unfinished" in _one_error_line(err)  # not without --force
    code, err = _train([*args, "--force"], capsys)
    assert code == 0, err
    ckpts = sorted((out / "checkpoints").iterdir())
    assert [p.name for p in ckpts] == ["step-0000002"] and not ckpts[0].is_symlink()
    assert not (out / "config.json").is_symlink() and json.loads((out / "training.json").read_text())["steps_done"] == 2
    assert untouched(file, folder)


# ----------------------------------------------------------------------------- other writers

def test_distill_data_refuses_a_link_as_its_output(tmp_path, capsys):
    file, folder = victim(tmp_path)
    link = tmp_path / "data.jsonl"
    link.symlink_to(file)
    code, err = _train(["drafter", "distill-data", "--target", "no-model", "-o", link], capsys)
    assert code == 2 and "symbolic link" in _one_error_line(err)
    assert untouched(file, folder)


def test_feature_cache_is_never_written_through_a_link(tmp_path):
    from specbench_cli.errors import UsageError
    from specbench_cli.training.heads.data import FEATURES_FILE, FeatureCache, _save_cache

    file, folder = victim(tmp_path)
    cache = FeatureCache(tokens=torch.tensor([2, 5, 6], dtype=torch.int32), features=torch.zeros(3, 4, dtype=torch.float16),
                         offsets=torch.tensor([0, 3]), starts=torch.tensor([1]), meta={})
    link = tmp_path / "linked.features"
    link.symlink_to(folder, target_is_directory=True)
    with pytest.raises(UsageError, match="symbolic link"):
        _save_cache(cache, link, {})
    own = tmp_path / "data.features"
    own.mkdir()
    (own / FEATURES_FILE).symlink_to(file)
    _save_cache(cache, own, {})
    assert not (own / FEATURES_FILE).is_symlink() and untouched(file, folder)


def test_study_result_files_replace_a_planted_link(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "results" / "reference" / "tools"))
    sys.modules.pop("bench_json", None)
    import bench_json

    file, folder = victim(tmp_path)
    for name, write in (("r.json", lambda out: bench_json.write_result({"a": 1}, out)),
                        ("t.md", lambda out: bench_json.write_table(["| a |"], out))):
        (tmp_path / name).symlink_to(file)
        write(tmp_path / name)
        assert not (tmp_path / name).is_symlink() and (tmp_path / name).read_text().strip()
    assert untouched(file, folder)


def _plain_writes(path: Path) -> list[str]:
    """Calls in a script that would write a file by opening its name (following a link there):
    `.write_text` / `.write_bytes`, `open(..., "w"|"a"|"x")`, `savefig` or `to_csv` given a path
    outside an `atomic_write` writer function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_lambda = {id(n) for lam in ast.walk(tree) if isinstance(lam, ast.Lambda) for n in ast.walk(lam.body)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        mode = next((a.value for a in node.args[1:2] if isinstance(a, ast.Constant)), None) or next(
            (k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)), "r")
        if name in ("write_text", "write_bytes") \
                or (name == "open" and isinstance(func, ast.Name) and any(c in str(mode) for c in "wax")) \
                or (name in ("savefig", "to_csv") and node.args and id(node) not in in_lambda):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_study_scripts_write_only_through_atomic_write():
    scripts = sorted((ROOT / "results" / "reference").glob("*/*.py"))
    assert len(scripts) > 10
    assert [w for s in scripts for w in _plain_writes(s)] == []


def test_the_plain_write_check_is_not_vacuous(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    script = tmp_path / "s.py"
    script.write_text("from pathlib import Path\nPath('a').write_text('x')\nopen('b', 'w')\nfig.savefig('c.png')\n"
                      "atomic_write(p, lambda tmp: fig.savefig(tmp))\nopen('d')\n")
    assert [w.split()[-1] for w in _plain_writes(script)] == ["write_text", "open", "savefig"]
