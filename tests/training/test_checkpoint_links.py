"""Training writes no file through a link it did not make: checkpoints (the temporary folder, the
step's name, the rotation) and, on --resume of a folder from elsewhere, the final model folder and
records. Each test plants the link and checks that what it names is untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.tiny import make_model, make_tokenizer
from helpers.victims import untouched, victim

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import UsageError
from specbench_cli.training.common.checkpoint import list_checkpoints, write_checkpoint


def _write(folder: Path) -> None:
    (folder / "state.json").write_text("{}")


def _complete(folder: Path) -> bool:
    return (folder / "state.json").is_file()


def test_a_link_at_the_temporary_name_never_receives_the_checkpoint(tmp_path):
    file, folder = victim(tmp_path)
    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "step-0000001.tmp").symlink_to(folder, target_is_directory=True)
    ck = write_checkpoint(root, 1, _write, keep=2, complete=_complete)
    assert ck.is_dir() and not ck.is_symlink() and (ck / "state.json").is_file()
    assert sorted(p.name for p in root.iterdir()) == ["step-0000001"] and untouched(file, folder)


def test_rotation_neither_follows_nor_fails_on_links(tmp_path):
    """`--keep 1`: a link at an older step's name is no checkpoint (never resumed from, never
    removed through); one at the name being saved is unlinked and replaced."""
    file, folder = victim(tmp_path)
    root = tmp_path / "checkpoints"
    root.mkdir()
    (folder / "state.json").write_text("{}")  # the link's folder even looks like a checkpoint
    (root / "step-0000001").symlink_to(folder, target_is_directory=True)
    (root / "step-0000003").symlink_to(folder, target_is_directory=True)
    assert list_checkpoints(root, _complete) == []
    write_checkpoint(root, 2, _write, keep=1, complete=_complete)
    write_checkpoint(root, 3, _write, keep=1, complete=_complete)
    assert [p.name for p in list_checkpoints(root, _complete)] == ["step-0000003"]
    assert not (root / "step-0000003").is_symlink() and (root / "step-0000001").is_symlink()
    (folder / "state.json").unlink()
    assert untouched(file, folder)


def test_a_link_as_the_checkpoints_folder_is_refused(tmp_path):
    file, folder = victim(tmp_path)
    root = tmp_path / "checkpoints"
    root.symlink_to(folder, target_is_directory=True)
    with pytest.raises(UsageError, match="symbolic link"):
        write_checkpoint(root, 1, _write, keep=1, complete=_complete)
    assert list_checkpoints(root, _complete) == [] and untouched(file, folder)


def test_resuming_a_folder_with_planted_links_writes_none_through_them(tmp_path):
    """A training folder from elsewhere: links at the final model's names, at the records and at
    the next checkpoint's temporary name. The resumed run replaces every one of them."""
    from specbench_cli.training.common.loop import TrainConfig, train_loop

    tok = make_tokenizer()
    ids = torch.randint(4, 128, (2, 8), generator=torch.Generator().manual_seed(0))

    def run(steps: int, resume: bool) -> dict:
        model = make_model(0, layers=1)

        def step_fn(step: int):
            loss = model(input_ids=ids, labels=ids).loss
            return loss, {"loss": loss.item()}

        def history_only(history: list[dict], folder: Path, title: str) -> None:  # the loss plot costs seconds
            atomic_write(folder / "history.jsonl", "".join(json.dumps(h) + "\n" for h in history))

        cfg = TrainConfig(steps=steps, batch_size=2, lr=1e-3, warmup=0, save_every=1, keep=1)
        return train_loop(model, tok, out, cfg, step_fn, {"test": True}, resume=resume, progress=False,
                          write_history=history_only)

    out = tmp_path / "run"
    run(1, resume=False)
    file, folder = victim(tmp_path)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "training.json", "history.jsonl"):
        (out / name).unlink()
        (out / name).symlink_to(file)
    (out / "checkpoints" / "step-0000002.tmp").symlink_to(folder, target_is_directory=True)
    summary = run(2, resume=True)
    assert summary["resumed_from"] == 1 and json.loads((out / "training.json").read_text())["steps_done"] == 2
    assert not any(p.is_symlink() for p in out.iterdir())
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-0000002"]
    assert untouched(file, folder)
