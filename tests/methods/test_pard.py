"""pard (a PARD parallel draft model): a drafter folder in AMD's published layout loads as
--draft-model and decodes AR's tokens; one draft forward gives the K rows a fresh forward over
the text and K-1 masks gives, and the draft cache holds exactly the accepted sequence between
steps; K follows the budget; a missing or impossible mask token is one line, exit 2, before any
model loads."""

from __future__ import annotations

import json
import os

import pytest
import torch
from helpers.cli import cli
from helpers.tiny import EOS, VOCAB, make_model, make_tokenizer, save_noisy_copy

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]
MASK = VOCAB - 2
# amd/PARD-Llama-3.2-1B, amd/PARD-Qwen2.5-0.5B, ...: a transformers model folder (safetensors,
# bfloat16) whose config.json names the mask token `pard_token` (a reserved token id of the
# vocabulary) and marks the drafter `"spd_type": "pard"`
PUBLISHED_FILES = {"config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                   "tokenizer.json", "tokenizer_config.json", "README.md"}


def published_pard(directory, mask_id=MASK, seed=3, **config_changes) -> str:
    """A tiny PARD drafter in the published layout: a noisy copy of the tiny target saved in
    bfloat16, its config.json written as transformers 4.x wrote the published ones."""
    model = make_model(0)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2 * p.std().clamp_min(1e-3))
    model.to(torch.bfloat16).save_pretrained(directory)
    tok = make_tokenizer()
    tok.save_pretrained(directory)
    config = json.loads((directory / "config.json").read_text())
    config.pop("dtype", None)
    rope = config.pop("rope_parameters", {}) or {}
    config.update({"torch_dtype": "bfloat16", "rope_theta": rope.get("rope_theta", 10000.0), "rope_scaling": None,
                   "transformers_version": "4.49.0", "pard_token": mask_id, "spd_type": "pard"})
    config.update(config_changes)
    for key, value in config_changes.items():
        if value is None:
            config.pop(key)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<pad>", "unk_token": "<unk>"}))
    (directory / "README.md").write_text("---\nlicense: mit\nlibrary_name: transformers\n---\nPARD\n")
    for extra in set(os.listdir(directory)) - PUBLISHED_FILES:
        os.remove(directory / extra)
    return str(directory)


@pytest.fixture(scope="module")
def pard_dir(tmp_path_factory):
    return published_pard(tmp_path_factory.mktemp("pard-published"))


@pytest.fixture(scope="module")
def target():
    return make_model(0)


def make_pard(target, draft, budget, **options):
    ctx = MethodContext(target, make_tokenizer(), budget=budget, draft_model=draft)
    return methods.get("pard").create(ctx, **options)


def test_the_published_layout_loads_and_decodes_ars_tokens(target, pard_dir):
    assert set(os.listdir(pard_dir)) == PUBLISHED_FILES
    dec = Decoder(as_target(target), {EOS})
    ar = methods.get("ar").create(MethodContext(target, make_tokenizer(), budget=1))
    for budget in (2, 5, 9):
        pard = make_pard(target, pard_dir, budget)
        assert pard.mask_id == MASK and pard.gamma == budget - 1
        got = dec.generate(pard, PROMPT, 40, budget)
        assert got.output_ids == dec.generate(ar, PROMPT, 40, 1).output_ids
        assert max(got.budget_used) == budget
        assert sum(got.accept_lengths) > got.steps  # some draft tokens accepted


class Probe:
    """Wraps a pard drafter; after every propose checks the draft rows against a fresh forward
    over the sequence and K-1 masks, and between steps that the cache holds the accepted text."""

    def __init__(self, pard, draft_model) -> None:
        self.pard, self.model = pard, draft_model
        self.name, self.needs_hidden_states = pard.name, False
        self.checked = 0

    def reset(self, prompt_ids):
        self.pard.reset(prompt_ids)

    def propose(self, state):
        seen = []
        real = self.pard._rows

        def spy(ids, n):
            rows = real(ids, n)
            seen.append((list(ids), n, rows))
            return rows

        self.pard._rows = spy
        try:
            draft = self.pard.propose(state)
        finally:
            self.pard._rows = real
        if seen:
            ids, n, rows = seen[0]
            assert self.pard.batch.length == self.pard.processed == len(ids)  # the masks are gone
            with torch.no_grad():
                fresh = self.model(input_ids=torch.tensor([ids + [MASK] * (n - 1)])).logits[0, -n:]
            torch.testing.assert_close(rows.float(), fresh.float(), rtol=1e-4, atol=1e-4)
            assert draft.tokens == fresh.argmax(-1).tolist()
            self.checked += 1
        return draft

    def observe(self, result):
        self.pard.observe(result)


def test_one_draft_forward_gives_the_rows_of_a_fresh_forward(target, tmp_path):
    from specbench_cli.models.load import load_model

    folder = published_pard(tmp_path / "f32", torch_dtype="float32")
    pard = make_pard(target, folder, 6)
    draft_model = load_model(folder).model
    probe = Probe(pard, draft_model)
    got = Decoder(as_target(target), {EOS}).generate(probe, PROMPT, 30, 6)
    assert probe.checked == sum(q > 1 for q in got.budget_used) > 5  # every step that drafted


def test_k_follows_the_budget_and_the_option_only_lowers_it(target, pard_dir):
    assert make_pard(target, pard_dir, 10).gamma == 9
    assert make_pard(target, pard_dir, 10, k=4).gamma == 4
    assert make_pard(target, pard_dir, 3, k=8).gamma == 2
    one = make_pard(target, pard_dir, 1)
    got = Decoder(as_target(target), {EOS}).generate(one, PROMPT, 8, 1)
    assert one.gamma == 0 and one.batch is None and got.budget_used == [1] * len(got.budget_used)
    params = make_pard(target, pard_dir, 5).params()
    assert params["k"] == 4 and params["mask_id"] == MASK and params["structure"] == "chain"


def test_the_mask_option_overrides_the_config(target, pard_dir):
    assert make_pard(target, pard_dir, 4, mask_id=5).mask_id == 5


@pytest.mark.parametrize("change,message", [
    ({"pard_token": None}, "no usable `pard_token`"),
    ({"pard_token": "mask"}, "no usable `pard_token`"),
    ({"pard_token": VOCAB + 5}, "outside the draft model's vocabulary"),
])
def test_a_bad_mask_token_is_refused_while_planning(tmp_path, change, message):
    folder = published_pard(tmp_path / "bad", **change)
    with pytest.raises(UsageError, match=message):
        methods.get("pard")(MethodContext(budget=4, draft_model=folder))


def test_no_draft_model_is_refused():
    with pytest.raises(UsageError, match="needs a PARD draft model"):
        methods.get("pard")(MethodContext(budget=4))


def test_the_vllm_key_is_read_too(tmp_path):
    folder = published_pard(tmp_path / "alias", pard_token=None, ptd_token_id=7)
    assert methods.get("pard")(MethodContext(budget=4, draft_model=folder)).mask_id == 7


def test_run_with_the_published_folder(tiny_model_dir, pard_dir, tmp_path, capsys):
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "ar,pard", "--draft-model", pard_dir,
                        "--limit", "1", "--categories", "qa", "--max-new-tokens", "12", "--bc", "4",
                        "--output-dir", str(tmp_path / "run"), "--threads", "1", "--no-report"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for f in (tmp_path / "run").rglob("samples.jsonl") for line in f.read_text().splitlines()]
    by = {r["method"]: r for r in rows}
    assert set(by) == {"ar", "pard"}
    assert by["pard"]["output_ids"] == by["ar"]["output_ids"] and by["pard"]["ar_match"] is True
    assert by["pard"]["method_params"]["mask_id"] == MASK


def test_a_folder_without_a_mask_token_exits_2_before_loading(tiny_model_dir, tmp_path, capsys):
    plain = save_noisy_copy(make_model(0), tmp_path / "plain", 0.1)
    capsys.readouterr()
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "pard", "--draft-model", plain,
                        "--limit", "1", "--output-dir", str(tmp_path / "run"), "--no-report"], capsys)
    assert code == 2 and "pard_token" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").rglob("samples.jsonl"))


@pytest.mark.parametrize("extra", [["--bc", "auto", "--auto-candidates", "2,4", "--auto-questions", "1",
                                    "--auto-tokens", "5"],
                                   ["--bc", "adaptive", "--auto-candidates", "2,4", "--auto-questions", "1",
                                    "--auto-tokens", "5"],
                                   ["--bc", "4", "--batch-size", "2"]], ids=["bc-auto", "bc-adaptive", "batch-2"])
def test_bc_auto_adaptive_and_batched_runs(tiny_model_dir, pard_dir, isolated_cache, tmp_path, capsys, extra):
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "ar,pard", "--draft-model", pard_dir,
                        "--tasks", "mini", "--limit", "1", "--categories", "qa,math_reasoning", "--max-new-tokens",
                        "12", "--output-dir", str(tmp_path / "run"), "--threads", "1", "--no-report", *extra], capsys)
    assert code == 0, err
    (run,) = [p for p in (tmp_path / "run").iterdir() if p.is_dir()]
    manifest = json.loads((run / "manifest.json").read_text())
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    mine = [r for r in rows if r["method"].startswith("pard")]
    assert len(mine) == 2 and all(r["ar_match"] for r in mine)
    if "adaptive" in extra:
        assert set(manifest["bc_adaptive"]) == {r["method"] for r in mine} and len(manifest["bc_adaptive"]) == 1
    elif "auto" in extra:
        (record,) = manifest["bc_auto"].values()
        assert record["chosen"] in (2, 4) and all(r["block_complexity"] == record["chosen"] for r in mine)
        assert all(max(r["budget_used"]) <= record["chosen"] for r in mine)
    else:
        assert all(r["batch_size"] == 2 for r in mine)
