"""Medusa-2 full models: the heads live inside a fine-tuned target's weights (`medusa_head.*`);
the import takes them out, and the target is that model folder."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.tiny import make_model, make_tokenizer


def full_model(folder, sharded: bool, heads: int = 3, layers: int = 1):
    """The tiny target saved as a Medusa-2 full model: its own tensors plus heads with their own
    vocabulary projections, config.json saying medusa_num_heads 5 (the tensors decide)."""
    from safetensors.torch import load_file, save_file

    model = make_model(0)
    model.save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    h = model.config.hidden_size
    g = torch.Generator().manual_seed(5)
    extra = {}
    for i in range(heads):
        for j in range(layers):
            extra[f"medusa_head.{i}.{j}.linear.weight"] = torch.randn(h, h, generator=g) * 0.1
            extra[f"medusa_head.{i}.{j}.linear.bias"] = torch.zeros(h)
        extra[f"medusa_head.{i}.{layers}.weight"] = model.lm_head.weight.detach().clone()
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update({"medusa_num_heads": 5, "medusa_num_layers": layers})
    (folder / "config.json").write_text(json.dumps(cfg))
    state = load_file(str(folder / "model.safetensors"))
    if not sharded:
        save_file({**state, **extra}, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return model, extra
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model-00001-of-00002.bin")
    torch.save(extra, folder / "pytorch_model-00002-of-00002.bin")
    weight_map = {**{k: "pytorch_model-00001-of-00002.bin" for k in state},
                  **{k: "pytorch_model-00002-of-00002.bin" for k in extra}}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return model, extra


@pytest.mark.parametrize("sharded", [False, True])
def test_heads_come_out_of_the_full_model_and_decode_like_ar(sharded, tmp_path, capsys):
    from helpers.cli import cli, only_run_dir, run_rows

    from specbench_cli.methods.heads.checkpoint import load_heads

    src = tmp_path / "medusa2-full"
    src.mkdir()
    model, extra = full_model(src, sharded)
    code, _, err = cli(["heads", "import", str(src), "--out", str(tmp_path / "heads")], capsys)
    assert code == 0, err
    cfg = json.loads((tmp_path / "heads" / "config.json").read_text())
    assert cfg["medusa_num_heads"] == 3 and cfg["specbench"]["target"] == str(src.resolve())
    heads = load_heads(tmp_path / "heads", model)
    assert heads.n_heads == 3 and heads.own_vocab == model.config.vocab_size
    torch.testing.assert_close(heads[1][0].linear.weight, extra["medusa_head.1.0.linear.weight"])
    if sharded:  # the safetensors form loads only from safetensors: the bins stay for transformers
        return
    args = ["run", "--model", str(src), "--methods", "ar,medusa", "--heads", str(tmp_path / "heads"), "--limit", "1",
            "--categories", "qa", "--max-new-tokens", "12", "--threads", "1", "--no-report", "--bc", "10",
            "--output-dir", str(tmp_path / "runs")]
    code, _, err = cli(args, capsys)
    assert code == 0, err
    rows = run_rows(only_run_dir(tmp_path / "runs"))
    assert len({tuple(r["output_ids"]) for r in rows}) == 1  # medusa's tokens are AR's
    other = tmp_path / "other"
    make_model(0).save_pretrained(other)
    make_tokenizer().save_pretrained(other)
    code, _, err = cli([*args[:2], str(other), *args[3:]], capsys)
    assert code == 2 and "trained for target" in err


def test_a_full_model_without_heads_exits_2(tmp_path, capsys):
    from helpers.cli import cli

    src = tmp_path / "plain"
    make_model(0).save_pretrained(src)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "medusa_num_heads": 4}))
    capsys.readouterr()  # (save_pretrained's progress bar)
    code, _, err = cli(["heads", "import", str(src), "--out", str(tmp_path / "h")], capsys)
    assert code == 2 and "medusa_head." in err and len(err.strip().splitlines()) == 1, err
