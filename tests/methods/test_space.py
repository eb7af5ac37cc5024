"""SPACE: the auto-correct layout (k candidates, a group of k masks after the root and after each
candidate), the next candidates read from the group after the accepted prefix, the mask id's
sources (option, config.json, tokenizer; refused in one line when there is none), a target
fine-tuned by `specbench train space` decoding exactly as its own AR with drafts accepted, and the
published checkpoints' layout (a plain Llama folder with rows beyond the tokenizer, the id given
on the command line) run end to end."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.artifacts import TINY_MASK_ID
from helpers.cli import cli
from helpers.tiny import EOS, VOCAB, WORDS, make_model, make_tokenizer

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder, DecodeState, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.space import Space, mask_id_in_folder
from specbench_cli.targets import as_target

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


def make(model, budget: int, tokenizer=None, **opts) -> Space:
    return Space.create(MethodContext(target=model, tokenizer=tokenizer, budget=budget), **opts)


def state(budget: int, remaining: int = 100) -> DecodeState:
    return DecodeState(ids=list(PROMPT), prompt_len=len(PROMPT), budget=budget, remaining=remaining)


def rows_for(n: int, length: int = 14) -> list[dict]:
    """Instruction/response rows over the tiny vocabulary whose responses follow a fixed stride."""
    rows = []
    for i in range(n):
        words = [WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(length)]
        rows.append({"id": f"r{i}", "instruction": f"write a poem about the {WORDS[i % len(WORDS)]} {i}",
                     "response": " ".join(words), "temperature": 0.0, "target": "tiny", "finished": i % 2 == 0})
    return rows


def test_registered_lossless_and_needs_a_mask_token():
    spec = methods.get("space")
    assert spec is Space and spec.lossless and spec.needs_training and "mask_token" in spec.requires
    assert spec.needs == ()  # a real token: no embedding-space access, any target can run it


@pytest.mark.parametrize("budget", range(1, 65))
def test_block_complexity_counts_candidates_and_masks(tiny_model, budget):
    m = make(tiny_model, budget, mask_id=TINY_MASK_ID)
    k = m.k
    assert (k + 1) ** 2 <= budget < (k + 2) ** 2
    m.reset(PROMPT)
    first = m.propose(state(budget))
    assert len(first) == (k if k else 0)      # step 0: no candidates yet, the root's group only
    m.cands = list(range(10, 10 + k))
    full = m.propose(state(budget))
    assert 1 + len(full) == (k + 1) ** 2 <= budget or k == 0


def test_layout_is_a_candidate_chain_with_a_mask_group_after_every_node(tiny_model):
    m = make(tiny_model, 16, mask_id=TINY_MASK_ID)   # k = 3
    m.reset(PROMPT)
    m.cands = [40, 41, 42]
    d = m.propose(state(16))
    d.validate()
    assert d.tokens[:3] == [40, 41, 42] and d.parents[:3] == [-1, 0, 1] and d.acceptable[:3] == [True] * 3
    assert d.tokens[3:] == [TINY_MASK_ID] * 12 and not any(d.acceptable[3:])
    assert d.embeds is None  # the mask token's own embedding
    for depth, group in enumerate(m.groups):  # group d hangs from chain node d (the root for d = 0)
        assert [d.parents[n] for n in group] == [depth - 1, group[0], group[1]]
    # the length cap leaves room for fewer candidates: one group per kept candidate, plus the root's
    short = m.propose(state(16, remaining=2))
    assert short.tokens[:1] == [40] and len(short) == 1 + 2 * 3 and len(m.groups) == 2


@pytest.mark.parametrize("accepted", [0, 1, 2, 3])
def test_next_candidates_are_the_argmax_of_the_group_after_the_accepted_prefix(tiny_model, accepted):
    m = make(tiny_model, 16, mask_id=TINY_MASK_ID)
    m.reset(PROMPT)
    m.cands = [40, 41, 42]
    d = m.propose(state(16))
    logits = torch.zeros(len(d) + 1, VOCAB)
    for depth, group in enumerate(m.groups):  # mask j of group d votes for token 60 + 10 d + j
        for j, node in enumerate(group):
            logits[node + 1, 60 + 10 * depth + j] = 5.0
    path = list(range(accepted))
    m.observe(VerifyResult(d, path, [d.tokens[a] for a in path] + [7], logits, None, None, state(16)))
    assert m.cands == [60 + 10 * accepted + j for j in range(3)]


def test_k_above_the_budget_is_refused_when_planning():
    with pytest.raises(UsageError, match=r"space k must be at most 2 at block complexity 10"):
        Space(MethodContext(budget=10), mask_id=5, k=3)
    assert Space(MethodContext(budget=10), mask_id=5, k=1).k == 1


def test_every_auto_candidate_budget_plans():
    for budget in (1, 2, 3, 4, 6, 8, 12, 16, 24):
        Space(MethodContext(budget=budget), mask_id=5)


def test_mask_id_from_config_then_tokenizer_and_none_is_refused(tiny_model, tmp_path):
    tok = make_tokenizer()
    with pytest.raises(UsageError, match="method space needs a target fine-tuned with a mask token"):
        make(tiny_model, 10, tok)
    tiny_model.config.space_mask_id = 99
    try:
        assert make(tiny_model, 10, tok).mask_id == 99
    finally:
        del tiny_model.config.space_mask_id
    tok.add_special_tokens({"mask_token": "[MASK]"})   # id 128: outside the tiny model's rows
    with pytest.raises(UsageError, match="mask id 128 is outside the target's vocabulary"):
        make(tiny_model, 10, tok)
    assert make(tiny_model, 10, tok, mask_id=7).mask_id == 7   # the option wins


def test_a_folder_without_a_mask_is_refused_at_planning(tmp_path, tiny_model_dir):
    with pytest.raises(UsageError, match="declares none"):
        Space(MethodContext(budget=10, target_ref=str(tiny_model_dir)))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "space_mask_id": 11}))
    assert mask_id_in_folder(tmp_path) == 11
    tok = make_tokenizer()
    tok.add_special_tokens({"mask_token": "[MASK]"})
    folder = tmp_path / "tok"
    tok.save_pretrained(folder)
    assert mask_id_in_folder(folder) == VOCAB
    assert Space(MethodContext(budget=10, target_ref=str(folder))).mask_id == VOCAB


def test_cli_refuses_a_target_without_a_mask_before_loading(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import specbench_cli.models.load as load

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(load, "load_model", no_load)
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "ar,space", "--limit", "1",
                        "--output-dir", str(tmp_path / "r"), "--no-report"], capsys)
    assert code == 2 and "method space needs a target fine-tuned with a mask token" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory):
    """The tiny target after a short `train space` run (k = 3): (model, tokenizer, folder)."""
    from specbench_cli.training.common.loop import TrainConfig
    from specbench_cli.training.space.train import SpaceConfig, train_space

    torch.set_num_threads(1)
    model, tok = make_model(0), make_tokenizer()
    out = tmp_path_factory.mktemp("space") / "model"
    cfg = TrainConfig(steps=120, batch_size=4, lr=3e-3, warmup=1, save_every=200, keep=1, seed=0)
    train_space(model, tok, rows_for(24), out, cfg, SpaceConfig(k=3), max_len=64, holdout=0.0, progress=False)
    return model.eval(), tok, out


def test_fine_tuned_target_decodes_as_its_own_ar_and_its_masks_draft(fine_tuned):
    """Lossless against AR of the SAME fine-tuned model; the trained mask token gets more drafts
    accepted than an ordinary token put in its place (the masks, not luck, draft)."""
    from specbench_cli.training.draft_model.finetune import build_examples

    model, tok, _ = fine_tuned
    mask = model.config.space_mask_id
    assert mask == VOCAB and model.config.space_mask_num == 3
    prompts = [e.input_ids[:e.start + 1] for e in build_examples(rows_for(24)[:6], tok, model, 64)]
    dec = Decoder(as_target(model), {EOS})
    for budget in (4, 10, 16):
        ctx = MethodContext(model, tok, budget=budget)
        ar = methods.get("ar").create(ctx)
        space, decoy = methods.get("space").create(ctx), methods.get("space").create(ctx, mask_id=TINY_MASK_ID)
        assert space.mask_id == mask
        extra = {"space": 0, "decoy": 0}
        for prompt in prompts:
            ref = dec.generate(ar, prompt, 32, budget).output_ids
            for key, method in (("space", space), ("decoy", decoy)):
                got = dec.generate(method, prompt, 32, budget)
                assert got.output_ids == ref, f"space differs from AR of the fine-tuned model at BC={budget}"
                assert max(got.budget_used, default=1) <= budget
                extra[key] += sum(got.accept_lengths) - got.steps
        assert extra["space"] > extra["decoy"] and extra["space"] >= len(prompts), (budget, extra)


def _space_rows(folder) -> list[dict]:
    rows = [json.loads(line) for f in folder.rglob("samples.jsonl") for line in f.read_text().splitlines()
            if line.strip()]
    return [r for r in rows if r["method"].startswith("space")]


def test_trained_folder_runs_from_the_command_line_batched_and_at_bc_auto(fine_tuned, tmp_path, capsys):
    _, _, folder = fine_tuned
    assert json.loads((folder / "config.json").read_text())["space_mask_id"] == VOCAB
    base = ["run", "--model", str(folder), "--methods", "ar,space", "--categories", "qa", "--max-new-tokens", "8",
            "--threads", "1", "--no-report"]
    code, _, err = cli(base + ["--limit", "2", "--batch-size", "2", "--bc", "9", "--output-dir", str(tmp_path / "b")],
                       capsys)
    assert code == 0, err
    got = _space_rows(tmp_path / "b")
    assert len(got) == 2 and all(r["batch_size"] == 2 and r["ar_match"] is True for r in got)
    assert all(r["method_params"]["mask_id"] == VOCAB and r["method_params"]["k"] == 2 for r in got)
    code, _, err = cli(base + ["--limit", "1", "--bc", "auto", "--auto-candidates", "1,4,9", "--auto-questions", "1",
                               "--auto-tokens", "8", "--output-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    got = _space_rows(tmp_path / "a")
    assert got and all(r["method_label"] == "space@auto" and r["block_complexity"] in (1, 4, 9) for r in got)
    assert all(r["method_params"]["k"] == {1: 0, 4: 1, 9: 2}[r["block_complexity"]] and r["ar_match"] for r in got)


def published_layout(folder, extra_rows: int = 3):
    """A folder in the layout of the published SPACE checkpoint (a Vicuna/Llama folder fine-tuned
    with mask id 32002 = base vocabulary + 2): config.json and weights of a plain Llama, the
    embedding and output matrices `extra_rows` rows larger than the tokenizer's vocabulary, no
    SPACE key anywhere and no mask token in the tokenizer (its evaluation script takes --mask_id)."""
    model = make_model(0)
    model.resize_token_embeddings(VOCAB + extra_rows, mean_resizing=False)
    model.save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == VOCAB + extra_rows and not any(k.startswith("space") for k in config)
    return folder, VOCAB + extra_rows - 1


def test_published_layout_runs_with_the_mask_id_option(tmp_path, capsys):
    folder, mask = published_layout(tmp_path / "vicuna-space")
    assert mask_id_in_folder(folder) is None
    base = ["run", "--model", str(folder), "--methods", "ar,space", "--limit", "1", "--categories", "mt_bench",
            "--max-new-tokens", "8", "--threads", "1", "--no-report"]
    code, _, err = cli(base + ["--output-dir", str(tmp_path / "a")], capsys)
    assert code == 2 and "-o space.mask_id=ID" in err
    code, _, err = cli(base + ["--output-dir", str(tmp_path / "b"), "-o", f"space.mask_id={mask}"], capsys)
    assert code == 0, err
    got = _space_rows(tmp_path / "b")
    assert got and all(r["method_params"]["mask_id"] == mask and r["ar_match"] is True for r in got)
