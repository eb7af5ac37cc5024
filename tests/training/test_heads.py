"""Draft heads (Medusa, EAGLE, KOALA): modules, checkpoints, trees, data, trainer, CLI."""

import json

import pytest
import torch
from helpers.cli import cli as run_cli
from safetensors.torch import load_file

from specbench_cli.errors import UsageError
from specbench_cli.methods.core.tree_shapes import default_medusa_paths
from specbench_cli.methods.heads.checkpoint import load_heads, save_heads
from specbench_cli.methods.heads.draft_trees import eagle2_tree, medusa_tree
from specbench_cli.methods.heads.model import EagleHead, MedusaHeads, causal_mask, eagle_config
from specbench_cli.training.heads.data import (
    build_feature_cache,
    heads_prompts,
    load_feature_cache,
    merge_feature_caches,
    spec_bench_overlap,
)
from specbench_cli.training.heads.prompts import GENERATORS, varied_prompts
from specbench_cli.training.heads.train import HeadsRecipe, score_heads, train_heads

WORDS = ["sea", "sun", "dog", "cat", "red", "blue", "one", "two", "poem", "story"]


def run_rows():
    return [{"instruction": f"write a poem about the {w}", "response": " ".join(["the cat sat on mat", w] * 5),
             "finished": True} for w in WORDS]


@pytest.fixture(scope="module")
def cache(tmp_path_factory, tiny_model, tiny_tok):
    folder = tmp_path_factory.mktemp("features")
    build_feature_cache(tiny_model, tiny_tok, run_rows(), folder, batch_size=4, meta={"target": "tiny"})
    return load_feature_cache(folder)


def _eagle(model, layers=2, seed=0):
    torch.manual_seed(seed)
    head = EagleHead(eagle_config(model.config, layers)).bind(model)
    for p in head.parameters():  # random, not the default init, so that trees branch
        torch.nn.init.normal_(p, std=0.3)
    return head.eval()


def test_medusa_shapes_and_distinct_blocks(tiny_model):
    heads = MedusaHeads(32, heads=3, layers=2).bind(tiny_model)
    assert heads.head_logits(torch.randn(32)).shape == (3, 128)
    assert heads.head_logits(torch.randn(5, 32)).shape == (5, 3, 128)
    blocks = [blk for head in heads for blk in head]
    assert len({id(b) for b in blocks}) == 6
    assert len({b.linear.weight.data_ptr() for b in blocks}) == 6
    assert set(heads.state_dict()) == {f"{i}.{j}.linear.{w}" for i in range(3) for j in range(2)
                                       for w in ("weight", "bias")}
    # zero-initialised weights: each block is x + SiLU(bias)
    assert all(float(b.linear.weight.detach().abs().sum()) == 0 for b in blocks)


def test_eagle_step_matches_full_forward(tiny_model):
    head = _eagle(tiny_model)
    assert "layers.0.input_layernorm.weight" not in head.state_dict()
    assert "layers.1.input_layernorm.weight" in head.state_dict()
    feats, toks = torch.randn(1, 7, 32), torch.randint(4, 128, (1, 7))
    full = head(feats, toks, causal_mask(torch.ones(1, 7, dtype=torch.bool)))[0]
    cache = head.new_cache()
    a, la = head.step(cache, feats[0, :4], toks[0, :4], torch.arange(4))
    b, lb = head.step(cache, feats[0, 4:], toks[0, 4:], torch.arange(4, 7))
    assert cache.length == 7
    assert torch.allclose(torch.cat([a, b]), full, atol=1e-5)
    assert lb.shape == (3, 128) and torch.allclose(lb, tiny_model.lm_head(b), atol=1e-5)


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_checkpoint_round_trip(tmp_path, tiny_model, kind):
    if kind == "medusa":
        head = MedusaHeads(32, 3, 2).bind(tiny_model)
        for p in head.parameters():
            torch.nn.init.normal_(p, std=0.2)
    else:
        head = _eagle(tiny_model, layers=3)
    save_heads(head, tmp_path / "h", {"target": "tiny", "tokens_seen": 10})
    files = sorted(p.name for p in (tmp_path / "h").iterdir())
    assert files == ["config.json", "medusa_lm_head.safetensors" if kind == "medusa" else "model.safetensors"]
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["specbench"]["kind"] == kind and cfg["specbench"]["target"] == "tiny"
    if kind == "eagle":
        assert cfg["num_hidden_layers"] == 3 and cfg["bias"] is True
    back = load_heads(tmp_path / "h", tiny_model)
    x = torch.randn(4, 32)
    if kind == "medusa":
        assert back.n_heads == 3 and back.n_layers == 2
        assert torch.equal(back.head_logits(x), head.head_logits(x))
    else:
        toks = torch.randint(4, 128, (4,))
        _, l1 = head.step(head.new_cache(), x, toks, torch.arange(4))
        _, l2 = back.step(back.new_cache(), x, toks, torch.arange(4))
        assert torch.equal(l1, l2)


def test_load_refuses_non_heads(tmp_path):
    from specbench_cli.errors import UsageError

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "medusa_lm_head.pt").write_bytes(b"not loaded")
    with pytest.raises(UsageError):
        load_heads(tmp_path)


@pytest.mark.parametrize("budget,depth,top_k", [(9, 5, 3), (4, 3, 4), (20, 4, 3), (1, 2, 2)])
def test_eagle2_tree_budget_and_order(tiny_model, budget, depth, top_k):
    head = _eagle(tiny_model)
    cache = head.new_cache()
    feats, toks = torch.randn(5, 32), torch.randint(4, 128, (5,))
    tree = eagle2_tree(head, cache, feats, toks, budget=budget, depth=depth, top_k=top_k)
    assert 1 <= len(tree.tokens) <= budget
    assert cache.length == 5  # drafted nodes removed, the fed pairs kept
    for i, p in enumerate(tree.parents):
        assert -1 <= p < i
        assert tree.depths[i] == (1 if p < 0 else tree.depths[p] + 1)
        if p >= 0:
            assert tree.scores[i] <= tree.scores[p] + 1e-6
    assert max(tree.depths) <= depth
    full = top_k + (depth - 1) * top_k * top_k
    if budget < full:
        assert len(tree.tokens) == budget


def test_eagle2_chain_is_greedy_unroll(tiny_model):
    """top_k = 1 gives the chain of the head's own greedy predictions."""
    head = _eagle(tiny_model)
    feats, toks = torch.randn(3, 32), torch.randint(4, 128, (3,))
    tree = eagle2_tree(head, head.new_cache(), feats, toks, budget=4, depth=4, top_k=1)
    assert tree.parents == [-1, 0, 1, 2]
    cache = head.new_cache()
    out, logits = head.step(cache, feats, toks, torch.arange(3))
    state, tok, chain = out[-1:], logits[-1].argmax().view(1), []
    for d in range(4):
        chain.append(int(tok))
        state, lg = head.step(cache, state, tok, torch.tensor([3 + d]))
        tok = lg[-1].argmax().view(1)
    assert tree.tokens == chain


def test_medusa_tree(tiny_model):
    heads = MedusaHeads(32, 3, 1).bind(tiny_model)
    logits = heads.head_logits(torch.randn(32))
    paths = default_medusa_paths(3)
    assert paths[0] == [0] and all(p[:-1] in paths[:i] for i, p in enumerate(paths) if len(p) > 1)
    tree = medusa_tree(logits, paths, budget=12)
    assert len(tree.tokens) == 12
    for i, p in enumerate(tree.parents):
        assert -1 <= p < i
        depth = tree.depths[i]
        assert tree.tokens[i] in logits[depth - 1].topk(10).indices.tolist()
    assert tree.tokens[0] == int(logits[0].argmax())


@pytest.fixture
def questions_file(spec_bench_questions):
    """Spec-Bench's question file in ../shared beside the checkout (skipped without it)."""
    return spec_bench_questions


def test_prompts_not_spec_bench(questions_file):
    spec_bench_questions = questions_file
    prompts = heads_prompts()
    assert len(prompts) > 250 and len({p["instruction"] for p in prompts}) == len(prompts)
    assert spec_bench_overlap(prompts, spec_bench_questions) == []
    # the check itself can fail: a Spec-Bench turn is found
    first = json.loads(spec_bench_questions.read_text().splitlines()[0])["turns"][0]
    assert spec_bench_overlap([{"instruction": first.upper()}], spec_bench_questions) == [first.upper()]


def test_varied_prompts_not_spec_bench(questions_file):
    prompts = varied_prompts(1500, seed=1)  # what results/reference/heads/heads_data_v2.sh generates
    assert len(prompts) == 1500 and len({p["instruction"] for p in prompts}) == 1500
    assert {p["category"] for p in prompts} == set(GENERATORS)
    assert varied_prompts(20, seed=1) == prompts[:20]  # seeded, any prefix is balanced
    assert spec_bench_overlap(prompts, questions_file) == []


def test_merge_feature_caches(tmp_path, tiny_model, tiny_tok):
    rows = run_rows()
    a = build_feature_cache(tiny_model, tiny_tok, rows[:4], tmp_path / "a", batch_size=4, meta={"target": "tiny"})
    b = build_feature_cache(tiny_model, tiny_tok, rows[4:], tmp_path / "b", batch_size=4, meta={"target": "tiny"})
    m = merge_feature_caches([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    loaded = load_feature_cache(tmp_path / "m")
    assert len(loaded) == len(rows) and loaded.meta["sequences"] == len(rows)
    assert loaded.response_tokens() == a.response_tokens() + b.response_tokens() == m.meta["response_tokens"]
    for e, (part, i) in enumerate([(a, i) for i in range(len(a))] + [(b, i) for i in range(len(b))]):
        o0, o1 = int(loaded.offsets[e]), int(loaded.offsets[e + 1])
        p0, p1 = int(part.offsets[i]), int(part.offsets[i + 1])
        assert torch.equal(loaded.tokens[o0:o1], part.tokens[p0:p1])
        assert torch.equal(loaded.features[o0:o1], part.features[p0:p1])
        assert int(loaded.starts[e]) == int(part.starts[i])
    build_feature_cache(tiny_model, tiny_tok, rows[:2], tmp_path / "c", meta={"target": "other"})
    with pytest.raises(UsageError, match="different targets"):
        merge_feature_caches([tmp_path / "a", tmp_path / "c"], tmp_path / "m2")


def test_feature_cache(cache, tiny_model, tiny_tok):
    assert len(cache) == len(WORDS)
    assert cache.features.shape == (cache.tokens.shape[0], 32)
    o0, o1 = int(cache.offsets[0]), int(cache.offsets[1])
    ids = cache.tokens[o0:o1][None]
    with torch.no_grad():
        ref = tiny_model.get_decoder()(input_ids=ids).last_hidden_state[0]
    assert torch.allclose(cache.features[o0:o1].float(), ref, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("kind,adv,amp", [("medusa", False, False), ("eagle", False, False), ("eagle", True, False),
                                          ("medusa", True, False), ("eagle", True, True)])
def test_training_loss_decreases(tmp_path, tiny_model, cache, kind, adv, amp):
    recipe = HeadsRecipe(kind=kind, heads_count=2, layers=2, adversarial=adv, disc_width=16, steps=25,
                         batch_size=4, lr=3e-3, warmup=2, save_every=100, holdout=0.2, autocast=amp)
    summary = train_heads(tiny_model, cache, recipe, tmp_path / "h", {"target": "tiny"}, progress=False)
    hist = json.loads((tmp_path / "h" / "history.json").read_text())
    first = sum(h["distill"] for h in hist[:3]) / 3
    last = sum(h["distill"] for h in hist[-3:]) / 3
    assert last < first
    assert (tmp_path / "h" / "curves.png").stat().st_size > 1000
    assert summary["adversarial"] is adv and summary["tokens_seen"] > 0
    if adv:
        assert all("d_loss" in h and "g_adv" in h for h in hist)
    assert "eval_top1_h0" in summary
    assert load_heads(tmp_path / "h", tiny_model).meta["label"] == recipe.label()
    assert summary["recipe"]["autocast"] is amp
    ids = load_file(str(tmp_path / "h" / "draft_vocab.safetensors"))["ids"]  # the training sub-vocabulary
    assert ids.numel() == summary["sub_vocab"] and bool((ids[1:] > ids[:-1]).all())


def test_resume_continues_exactly(tmp_path, tiny_model, cache):
    def recipe(steps):
        return HeadsRecipe(kind="eagle", layers=1, adversarial=True, disc_width=16, steps=steps, batch_size=3,
                           lr=3e-3, warmup=2, save_every=3, holdout=0.2)

    train_heads(tiny_model, cache, recipe(6), tmp_path / "a", {}, progress=False)
    train_heads(tiny_model, cache, recipe(3), tmp_path / "b", {}, progress=False)
    (tmp_path / "b" / "training.json").unlink()
    with pytest.raises(Exception, match="--resume"):
        train_heads(tiny_model, cache, recipe(6), tmp_path / "b", {}, progress=False)
    train_heads(tiny_model, cache, recipe(6), tmp_path / "b", {}, resume=True, progress=False)
    ha = json.loads((tmp_path / "a" / "history.json").read_text())
    hb = json.loads((tmp_path / "b" / "history.json").read_text())
    assert [h["step"] for h in hb] == list(range(1, 7))
    for x, y in zip(ha, hb):
        assert x["distill"] == pytest.approx(y["distill"], rel=1e-5)
        assert x["d_loss"] == pytest.approx(y["d_loss"], rel=1e-5)
    a, b = load_heads(tmp_path / "a"), load_heads(tmp_path / "b")
    for k, v in a.state_dict().items():
        assert torch.allclose(v, b.state_dict()[k], atol=1e-6), k


@pytest.mark.parametrize("args,msg", [
    (["--kind", "koala"], "unknown head kind"),
    (["--layers", "0"], "--layers"),
    (["--heads-count", "0", "--kind", "medusa"], "--heads-count"),
    (["--lambda", "-1", "--adversarial"], "--lambda"),
    (["--dtype", "fp8"], "dtype"),
])
def test_cli_bad_options_exit_2(tmp_path, capsys, args, msg):
    code, err = cli(["train", "heads", "--data", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o"),
                     *args], capsys)
    assert code == 2 and msg in err and "Traceback" not in err


def cli(args, capsys):
    """Run `specbench ARGS` in-process; (exit code, stderr on one line)."""
    code, _, err = run_cli([str(a) for a in args], capsys)
    return code, " ".join(err.split())


def test_cli_trains_tiny(tmp_path, capsys, tiny_model_dir):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({**r, "target": str(tiny_model_dir)}) + "\n" for r in run_rows()))
    args = ["train", "heads", "--data", str(data), "--out", str(tmp_path / "m"), "--kind", "medusa",
            "--heads-count", "2", "--steps", "4", "--save-every", "2", "-q"]
    code, err = cli(args, capsys)
    assert code == 0, err
    assert (tmp_path / "d.jsonl.features" / "features.safetensors").is_file()
    assert (tmp_path / "d.jsonl.features" / "vocab.safetensors").is_file()
    assert json.loads((tmp_path / "m" / "training.json").read_text())["steps_done"] == 4
    code, err = cli(args, capsys)  # same --out again without --resume
    assert code == 2 and "--resume" in err


def test_eagle2_tree_scores_equal_path_unrolls(tiny_model):
    """Every node's score is the log-prob of its path when the head runs that path alone: the tree
    masks and positions give each node exactly its ancestors."""
    head = _eagle(tiny_model)
    feats, toks = torch.randn(4, 32), torch.randint(4, 128, (4,))
    tree = eagle2_tree(head, head.new_cache(), feats, toks, budget=15, depth=4, top_k=3)
    assert max(tree.depths) >= 3 and len(set(tree.parents)) > 3
    for i in range(len(tree.tokens)):
        path, a = [], i
        while a >= 0:
            path.insert(0, tree.tokens[a])
            a = tree.parents[a]
        cache = head.new_cache()
        out, logits = head.step(cache, feats, toks, torch.arange(4))
        state, total = out[-1:], 0.0
        for d, tok in enumerate(path):
            total += torch.log_softmax(logits[-1], -1)[tok].item()
            state, logits = head.step(cache, state, torch.tensor([tok]), torch.tensor([4 + d]))
        assert total == pytest.approx(tree.scores[i], abs=1e-4)


def test_score_heads_ranks_trained_above_fresh(tiny_heads, tiny_model, tiny_tok, tmp_path):
    from helpers.tiny_heads import self_distill_rows

    build_feature_cache(tiny_model, tiny_tok, self_distill_rows(tiny_model, tiny_tok), tmp_path, meta={"target": "t"})
    cache = load_feature_cache(tmp_path)
    weight = tiny_model.get_output_embeddings().weight
    seqs = list(range(len(cache)))
    trained = score_heads(load_heads(tiny_heads["eagle"], tiny_model), cache, seqs, weight)
    fresh = score_heads(_eagle(tiny_model, layers=1), cache, seqs, weight)
    assert 0 <= fresh["eval_top1_h0"] < trained["eval_top1_h0"] <= 1
    medusa = score_heads(load_heads(tiny_heads["medusa"], tiny_model), cache, seqs, weight)
    assert {f"eval_top1_h{i}" for i in range(3)} <= set(medusa)


def test_discriminator_learns_to_separate():
    """KOALA's D must be able to tell a peaked target distribution from a flatter, noisier head's
    given the hidden state (the earlier softmax-probability input stayed at chance here and on
    real heads: accuracy 0.56, L_D 1.379 after these 300 steps)."""
    from specbench_cli.training.heads.losses import Discriminator, d_loss

    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    w = torch.randn(300, 32, generator=g)

    def sample(n):
        h = torch.randn(n, 32, generator=g)
        real = 1.5 * (h @ w.t())
        return h, real, real / 3 + torch.randn(real.shape, generator=g)

    d = Discriminator(32, 300, layers=1, width=32)
    opt = torch.optim.AdamW(d.parameters(), lr=3e-4, betas=(0.5, 0.999))
    for _ in range(300):
        loss = d_loss(d, *sample(64))
        opt.zero_grad()
        loss.backward()
        opt.step()
    h, r, f = sample(512)
    with torch.no_grad():
        acc = ((d(h, r) > 0).float().mean() + (d(h, f) < 0).float().mean()).item() / 2
        assert acc > 0.62
        assert d_loss(d, h, r, f).item() < 1.3  # 2 ln 2 = 1.386 is chance
