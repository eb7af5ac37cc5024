"""The `medusa` and `eagle` methods: drafts within the budget, exactness (greedy trees and chains;
the tree case at BC 1/4/10/30 is in test_lossless.py), chain drafts with probabilities under
sampling, labels and parameter counts from the checkpoint, and the option / checkpoint checks
(exit 2 before any model loads where possible)."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch
from helpers.cli import cli
from helpers.tiny import EOS, make_model

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.drafter import Structure
from specbench_cli.decoding.verify import SamplingConfig
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.heads.checkpoint import save_heads
from specbench_cli.methods.heads.model import EagleHead, MedusaHeads, count_params, eagle_config
from specbench_cli.targets import as_target

PROMPTS = [[2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14], [2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 77]]
KINDS = ["medusa", "eagle"]


def recording(method):
    """Wrap `propose` to keep every draft."""
    drafts, inner = [], method.propose

    def propose(state):
        d = inner(state)
        drafts.append((d, state.remaining))
        return d
    method.propose = propose
    return drafts


@pytest.mark.parametrize("kind", KINDS)
def test_tree_drafts_fill_the_budget_and_branch(kind, tiny_model, tiny_tok, tiny_heads):
    budget = 10
    method = methods.get(kind).create(MethodContext(tiny_model, tiny_tok, budget=budget), heads=tiny_heads[kind])
    assert method.structure is Structure.TREE and method.needs_hidden_states
    drafts = recording(method)
    gen = Decoder(as_target(tiny_model), {EOS}).generate(method, PROMPTS[0], 40, budget)
    assert max(gen.budget_used) <= budget
    full = [d for d, remaining in drafts if remaining > 1]
    assert full and all(len(d) == budget - 1 for d in full)  # the trees are trimmed to BC-1, not smaller
    assert any(not d.is_chain for d in full)  # real trees
    for d in full:
        d.validate()


@pytest.mark.parametrize("budget", [4, 10])
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_chain_option_equals_ar(kind, budget, tiny_model, tiny_tok, tiny_heads):
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    method = methods.get(kind).create(ctx, heads=tiny_heads[kind], chain=True)
    assert method.structure is Structure.CHAIN and method.label().endswith(",chain=True)")
    drafts = recording(method)
    dec, ar = Decoder(as_target(tiny_model), {EOS}), methods.get("ar").create(ctx)
    accepted = 0
    for prompt in PROMPTS:
        got = dec.generate(method, prompt, 40, budget)
        assert got.output_ids == dec.generate(ar, prompt, 40, budget).output_ids
        accepted += sum(got.accept_lengths) - got.steps
    assert all(d.is_chain and d.probs is None for d, _ in drafts)
    assert accepted > 0


@pytest.mark.parametrize("kind", KINDS)
def test_sampling_drafts_chains_with_probabilities(kind, tiny_model, tiny_tok, tiny_heads):
    budget, sampling = 5, SamplingConfig(temperature=0.8, top_p=0.95)
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget, sampling=sampling, seed=3)
    method = methods.get(kind).create(ctx, heads=tiny_heads[kind])
    assert method.structure is Structure.CHAIN
    drafts = recording(method)
    dec = Decoder(as_target(tiny_model), {EOS}, sampling)
    gen = dec.generate(method, PROMPTS[1], 30, budget, torch.Generator().manual_seed(0))
    assert len(gen.output_ids) > 0 and max(gen.budget_used) <= budget
    drafted = [d for d, _ in drafts if len(d)]
    assert drafted
    for d in drafted:
        assert d.is_chain and d.probs is not None and d.probs.shape == (len(d), 128)
        assert torch.allclose(d.probs.sum(-1), torch.ones(len(d)), atol=1e-5)
        assert all(d.probs[i, t] > 0 for i, t in enumerate(d.tokens))  # drawn from these rows


@pytest.mark.parametrize("kind", KINDS)
def test_draft_vocabulary_restricts_drafts_and_stays_exact(kind, tmp_path, tiny_model, tiny_tok, tiny_heads):
    """vocab=auto: the heads rank only the stored ids plus the prompt's tokens; with a deliberately
    small stored vocabulary every draft stays inside it and the output is still AR's."""
    from safetensors.torch import save_file

    folder = tmp_path / kind
    shutil.copytree(tiny_heads[kind], folder)
    stored = torch.tensor([3, 5, 9, 14, 40, 41, 42, 60])
    save_file({"ids": stored}, str(folder / "draft_vocab.safetensors"))
    ctx = MethodContext(tiny_model, tiny_tok, budget=8)
    dec, ar = Decoder(as_target(tiny_model), {EOS}), methods.get("ar").create(ctx)
    method = methods.get(kind).create(ctx, heads=str(folder))
    full = methods.get(kind).create(ctx, heads=str(folder), vocab="full")
    drafts = recording(method)
    for prompt in PROMPTS:
        expected = dec.generate(ar, prompt, 30, 8).output_ids
        assert dec.generate(method, prompt, 30, 8).output_ids == expected
        allowed = set(stored.tolist()) | set(prompt)
        assert method.head.draft_ids.tolist() == sorted(allowed)
        assert all(set(d.tokens) <= allowed for d, _ in drafts)
        drafts.clear()
        assert dec.generate(full, prompt, 30, 8).output_ids == expected
        assert full.head.draft_ids is None
    assert full.label().endswith(",vocab=full)")


def test_draft_vocabulary_under_sampling_scatters_to_the_full_vocabulary(tmp_path, tiny_model, tiny_tok, tiny_heads):
    from safetensors.torch import save_file

    folder = tmp_path / "eagle"
    shutil.copytree(tiny_heads["eagle"], folder)
    save_file({"ids": torch.arange(20, 60)}, str(folder / "draft_vocab.safetensors"))
    sampling = SamplingConfig(temperature=0.8)
    ctx = MethodContext(tiny_model, tiny_tok, budget=5, sampling=sampling, seed=1)
    method = methods.get("eagle").create(ctx, heads=str(folder))
    drafts = recording(method)
    Decoder(as_target(tiny_model), {EOS}, sampling).generate(method, PROMPTS[1], 20, 5, torch.Generator().manual_seed(0))
    allowed = torch.zeros(128, dtype=torch.bool)
    allowed[20:60] = True
    allowed[PROMPTS[1]] = True
    drafted = [d for d, _ in drafts if len(d)]
    assert drafted
    for d in drafted:
        assert d.probs.shape == (len(d), 128) and torch.allclose(d.probs.sum(-1), torch.ones(len(d)), atol=1e-5)
        assert float(d.probs[:, ~allowed].abs().sum()) == 0.0 and all(allowed[t] for t in d.tokens)


def test_draft_vocabulary_checks(tmp_path, tiny_model, tiny_tok, tiny_heads):
    from safetensors.torch import save_file

    ctx = MethodContext(tiny_model, tiny_tok, budget=4)
    with pytest.raises(UsageError, match="eagle.vocab must be one of auto, full"):
        methods.get("eagle")(ctx, heads=tiny_heads["eagle"], vocab="tiny")
    folder = tmp_path / "bad"
    shutil.copytree(tiny_heads["medusa"], folder)
    save_file({"ids": torch.tensor([5, 3])}, str(folder / "draft_vocab.safetensors"))
    with pytest.raises(UsageError, match="sorted distinct"):
        methods.get("medusa")(ctx, heads=str(folder))
    save_file({"ids": torch.tensor([3, 500])}, str(folder / "draft_vocab.safetensors"))
    with pytest.raises(UsageError, match="ids >= the target's vocabulary"):
        methods.get("medusa").create(ctx, heads=str(folder))
    methods.get("medusa").create(ctx, heads=str(folder), vocab="full")  # the file is not read then


def test_heads_flag_picks_the_one_head_method():
    from specbench_cli.methods.heads.common import apply_heads_flag

    opts: dict = {}
    apply_heads_flag(["ar", "pld", "eagle"], opts, "/h")
    assert opts == {"eagle": {"heads": "/h"}}
    opts = {"eagle": {"heads": "/e"}}
    apply_heads_flag(["medusa", "eagle"], opts, "/m")
    assert opts == {"eagle": {"heads": "/e"}, "medusa": {"heads": "/m"}}
    with pytest.raises(UsageError, match="needs a head method"):
        apply_heads_flag(["ar", "pld"], {}, "/h")
    with pytest.raises(UsageError, match="ambiguous"):
        apply_heads_flag(["medusa", "eagle"], {}, "/h")
    apply_heads_flag(["pld"], opts, None)  # no flag: nothing to do


def _save_eagle(model, folder, layers, meta):
    torch.manual_seed(1)
    head = EagleHead(eagle_config(model.config, layers)).bind(model)
    save_heads(head, folder, meta)
    return count_params(head)


def test_koala_label_and_params_from_metadata(tmp_path, tiny_model, tiny_tok):
    ctx = MethodContext(tiny_model, tiny_tok, budget=6)
    n2 = _save_eagle(tiny_model, tmp_path / "k2", 2, {"label": "eagle(K=2,adv)", "adversarial": True})
    n1 = _save_eagle(tiny_model, tmp_path / "k1", 1, {})
    eagle = methods.get("eagle")(ctx, heads=str(tmp_path / "k2"), top_k=3)
    assert eagle.label() == "eagle(K=2,adv,top_k=3)" and eagle.extra_params == n2  # before loading: metadata
    eagle.bind(tiny_model, tiny_tok)
    assert eagle.extra_params == n2 and eagle.params()["top_k"] == 3 and eagle.params()["depth"] == 5
    plain = methods.get("eagle").create(ctx, heads=str(tmp_path / "k1"))
    assert plain.label() == "eagle(K=1)" and plain.extra_params == n1 < n2
    save_heads(MedusaHeads(32, 2, 3), tmp_path / "m", {})  # no label in the metadata: from the weights
    medusa = methods.get("medusa").create(ctx, heads=str(tmp_path / "m"))
    assert medusa.label() == "medusa(H=2,K=3)" and medusa.extra_params == 2 * 3 * (32 * 32 + 32)


def test_checkpoint_checks(tmp_path, tiny_model, tiny_tok, tiny_heads):
    ctx = MethodContext(tiny_model, tiny_tok, budget=4)
    with pytest.raises(UsageError, match="holds eagle heads"):
        methods.get("medusa")(ctx, heads=tiny_heads["eagle"])
    with pytest.raises(UsageError, match="not a heads folder"):
        methods.get("eagle")(ctx, heads=str(tmp_path))
    other = MethodContext(tiny_model, tiny_tok, budget=4, target_ref=str(tmp_path / "another-model"))
    with pytest.raises(UsageError, match="trained for target 'tiny'"):
        methods.get("eagle")(other, heads=tiny_heads["eagle"])
    wide = make_model(0, hidden=48)
    for kind in KINDS:
        method = methods.get(kind)(MethodContext(budget=4), heads=tiny_heads[kind])  # plans without a model
        with pytest.raises(UsageError, match="do not fit this target"):
            method.bind(wide, tiny_tok)


@pytest.mark.parametrize("kind", KINDS)
def test_missing_heads_exits_2_before_any_model_loads(kind, capsys, monkeypatch, tmp_path):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr("specbench_cli.models.load.load_model", no_model)
    start = time.perf_counter()
    code, _, err = cli(["run", "--methods", kind, "--output-dir", str(tmp_path)], capsys)
    elapsed = time.perf_counter() - start
    err = " ".join(err.split())
    assert code == 2, err
    assert f"-o {kind}.heads=HEADS_DIR" in err and f"specbench train heads --kind {kind}" in err
    assert "Traceback" not in err
    assert elapsed < 5.0, f"took {elapsed:.2f} s"  # generous: the CPU is shared
    assert not list(tmp_path.iterdir())


def test_cli_run_with_heads(tiny_model_dir, tiny_heads, tmp_path, capsys):
    """End to end: rows carry the head label, its parameter count and AR's tokens; heads
    trained for another target exit 2."""
    heads = tmp_path / "eagle-heads"
    shutil.copytree(tiny_heads["eagle"], heads)
    args = ["run", "--model", str(tiny_model_dir), "--methods", "ar,eagle", "--limit", "1", "--categories", "qa",
            "--max-new-tokens", "12", "--threads", "1", "--no-report", "--heads", str(heads)]
    code, _, err = cli(args + ["--output-dir", str(tmp_path / "bad")], capsys)
    assert code == 2 and "trained for target 'tiny'" in " ".join(err.split())
    cfg = json.loads((heads / "config.json").read_text())
    cfg["specbench"]["target"] = str(tiny_model_dir)
    (heads / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "runs"
    code, _, err = cli(args + ["--output-dir", str(out)], capsys)
    assert code == 0, err
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    (row,) = [r for r in rows if r["method"] == "eagle"]
    assert row["status"] == "ok" and row["ar_match"] is True
    assert row["method_label"] == "eagle(K=1)" and row["extra_params"] == cfg["specbench"]["params"] > 0
    assert row["structure"] == "tree" and row["method_params"]["heads"] == str(heads)  # --heads = -o eagle.heads
    code, _, err = cli(args[:4] + ["ar,pld"] + args[5:] + ["--output-dir", str(tmp_path / "nohead")], capsys)
    assert code == 2 and "--heads needs a head method" in " ".join(err.split())


def test_not_in_the_default_method_list():
    from specbench_cli.run.plan import default_methods

    assert not {"medusa", "eagle"} & set(default_methods())
    assert methods.describe("medusa")["needs_training"] is True and methods.describe("eagle")["lossless"] is True
