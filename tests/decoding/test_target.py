"""The one seam between the loop and the model (decoding/target.py): the transformers target
verifies any batch of trees exactly as separate forwards do, a method needing a capability the
run's target lacks is refused before any model loads, and a target registered by name runs the
same loop."""

from __future__ import annotations

import pytest
import torch
from helpers.tiny import EOS

from specbench_cli import methods, targets
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.target import CAPABILITIES, MissingCapability, Target, check_capabilities
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target
from specbench_cli.targets.hf.target import HFTarget

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


class BareTarget(HFTarget):
    """The tiny transformers model behind a target that declares no capability beyond logits."""

    name = "bare"
    capabilities = frozenset()

    @classmethod
    def load(cls, ref, *, device="cpu", dtype="float32", **options):
        from specbench_cli.models.load import load_model

        return cls(load_model(ref, device=device, dtype=dtype).model)

    def token_embeddings(self):
        raise self.lacks("token_embeddings")

    @property
    def config(self):
        raise self.lacks("config")


@pytest.fixture
def bare_registered():
    targets.register("bare", f"{__name__}:BareTarget")
    yield
    targets.REGISTRY.pop("bare", None)


def test_hf_target_declares_every_capability_and_a_bare_one_says_what_it_lacks(tiny_model):
    assert HFTarget.capabilities == frozenset(CAPABILITIES)
    bare = BareTarget(tiny_model)
    with pytest.raises(MissingCapability, match="token_embeddings"):
        bare.token_embeddings()
    assert getattr(bare, "config", None) is None  # a missing capability reads as a missing attribute


def test_a_batch_verifies_each_row_as_its_own_forward(tiny_model):
    """Rows of one verify forward give the logits a batch of one gives for the same root + tree."""
    t = as_target(tiny_model)
    prompts = [PROMPT, PROMPT[:5]]
    drafts = [Draft(tokens=[7, 8, 9], parents=[-1, -1, 0]), Draft.chain([4])]
    with torch.inference_mode():
        batch, pre = t.start(prompts, 8)
        got = t.verify(batch, [3, 4], drafts).logits
        want = []
        for prompt, root, d in zip(prompts, [3, 4], drafts):
            one, _ = t.start([prompt], 8)
            want.append(t.verify(one, [root], [d]).logits)
    assert torch.allclose(got, torch.cat(want), atol=1e-4)


def test_commit_keeps_the_accepted_path_and_rolls_back_the_rest(tiny_model):
    """After commit the next forward sees exactly root + accepted path: the same logits as a
    fresh prefill of the longer prompt."""
    t = as_target(tiny_model)
    with torch.inference_mode():
        batch, _ = t.start([PROMPT], 8)
        past = batch.length
        t.verify(batch, [3], [Draft(tokens=[7, 8, 9], parents=[-1, -1, 1])])
        t.commit(batch, past, [[0, 2]])  # root 3 and node 1 (token 8)
        after = t.verify(batch, [11], [Draft()]).logits
        fresh, _ = t.start([PROMPT + [3, 8]], 8)
        want = t.verify(fresh, [11], [Draft()]).logits
    assert batch.length == len(PROMPT) + 3
    assert torch.allclose(after, want, atol=1e-4)


def test_a_method_needing_a_missing_capability_is_refused_in_one_line():
    line = check_capabilities("mask-probe", methods.get("mask-probe").needs, "bare", frozenset())
    assert line.startswith("method mask-probe needs what target 'bare' does not provide: token_embeddings")
    assert check_capabilities("pld", methods.get("pld").needs, "bare", frozenset()) is None
    for head in ("eagle", "eagle3", "medusa", "hydra"):
        assert "hidden_states" in methods.get(head).needs
    assert "layer_features" in methods.get("eagle3").needs


def test_a_fallback_to_a_head_method_needs_what_the_heads_need(tiny_head_folders):
    """suffix with an EAGLE fallback reads hidden states through its delegate: a bare target is refused."""
    from specbench_cli.config import MethodsSection, ModelSection, RunConfig
    from specbench_cli.run.plan import method_needs, plan_methods

    cfg = RunConfig(model=ModelSection(name="tiny"),
                    methods=MethodsSection(names=["suffix"], options={"suffix": {
                        "fallback": "eagle", "heads": tiny_head_folders["eagle"]}}))
    suffix = {inst.label: m for inst, m in plan_methods(cfg).items()}["suffix"]  # AR is always planned too
    assert {"hidden_states", "output_projection"} <= set(method_needs(suffix))


def test_run_refuses_before_loading_and_runs_what_the_target_can(tiny_model_dir, tmp_path, capsys, bare_registered,
                                                                   monkeypatch):
    from helpers.cli import cli

    import specbench_cli.models.load as load

    loads = []
    real = load.load_model
    monkeypatch.setattr(load, "load_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    code, _, err = cli(["run", "--target", "bare", "--model", str(tiny_model_dir), "--methods", "ar,mask-probe",
                        "--limit", "1", "--output-dir", str(tmp_path / "refused"), "--no-report"], capsys)
    assert code == 2 and "mask-probe needs what target 'bare' does not provide" in err and not loads
    assert len(err.strip().splitlines()) == 1

    code, _, err = cli(["run", "--target", "nosuch", "--methods", "ar", "--limit", "1"], capsys)
    assert code == 2 and "unknown target 'nosuch'" in err

    outs = {}
    for name in ("hf", "bare"):
        out = tmp_path / name
        code, _, err = cli(["run", "--target", name, "--model", str(tiny_model_dir), "--methods", "ar,pld",
                            "--limit", "1", "--categories", "qa", "--max-new-tokens", "12", "--forward", "sdpa",
                            "--output-dir", str(out), "--no-report"], capsys)
        assert code == 0, err
        import json

        (run,) = out.iterdir()
        outs[name] = [json.loads(line)["output_ids"] for line in (run / "samples.jsonl").read_text().splitlines()]
    assert outs["bare"] == outs["hf"]


def test_a_drafter_reaches_only_what_the_target_offers(tiny_model, tiny_tok):
    """Decoding through a bare target works for methods that need nothing beyond logits."""
    bare = BareTarget(tiny_model)
    ctx = MethodContext(bare, tiny_tok, budget=6)
    got = Decoder(as_target(bare), {EOS}).generate(methods.get("pld").create(ctx), PROMPT, 20, 6).output_ids
    want = Decoder(as_target(tiny_model), {EOS}).generate(methods.get("ar").create(ctx), PROMPT, 20, 1).output_ids
    assert got == want
    assert isinstance(ctx.target, Target)
