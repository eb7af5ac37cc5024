"""sps (draft-model speculative decoding): the draft model's KV cache always holds exactly a
prefix of the accepted sequence, full acceptance yields gamma + 1 tokens per step, sampled
drafts carry the draft model's processed distributions, and bad set-ups are one clear error."""

from __future__ import annotations

import pytest
import torch
from helpers.cli import cli
from helpers.tiny import EOS, VOCAB, make_tokenizer, save_tiny

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.verify import SamplingConfig, target_probs
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.sps import SpeculativeSampling
from specbench_cli.targets import as_target

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


def untied_model(seed: int, noise: float = 0.0, base=None):
    """A random Llama with an untied head: unlike tiny.make_model (tied and sharpened, which
    greedily repeats its last token) its greedy text varies, so a draft model can be wrong.
    With `base`, a copy of it with Gaussian noise on every weight."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=False, bos_token_id=2, eos_token_id=EOS, pad_token_id=1)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    if base is not None:
        model.load_state_dict(base.state_dict())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(noise * torch.randn_like(p))
    return model.eval()


def save(model, directory):
    model.save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def target():
    return untied_model(0)


@pytest.fixture(scope="module")
def target_dir(target, tmp_path_factory):
    return save(target, tmp_path_factory.mktemp("sps-target"))


@pytest.fixture(scope="module")
def noisy_dir(target, tmp_path_factory):
    """A draft model that agrees with the target's greedy choice most of the time, not always."""
    return save(untied_model(5, noise=0.003, base=target), tmp_path_factory.mktemp("sps-noisy"))


def make_sps(target, draft_dir, budget, sampling=None, **options) -> SpeculativeSampling:
    ctx = MethodContext(target, make_tokenizer(), budget=budget, draft_model=draft_dir,
                        sampling=sampling or SamplingConfig())
    return methods.get("sps").create(ctx, **options)


class SyncProbe:
    """Wraps an sps drafter; after every step checks the draft cache against a fresh run."""

    def __init__(self, sps: SpeculativeSampling) -> None:
        self.sps = sps
        self.name = sps.name
        self.needs_hidden_states = False
        self.steps: list[tuple[int, int]] = []  # (draft size, accepted) per step

    def reset(self, prompt_ids):
        self.sps.reset(prompt_ids)
        assert self.sps.batch is None and self.sps.processed == 0

    def propose(self, state):
        self.base = len(state.ids)
        self.seq = list(state.ids)
        draft = self.sps.propose(state)
        self.draft = draft
        return draft

    @torch.inference_mode()
    def observe(self, result):
        self.sps.observe(result)
        sps, n, k = self.sps, len(self.draft), len(result.accepted)
        seq = self.seq + result.new_tokens
        self.steps.append((n, k))
        assert sps.batch.length == sps.processed
        if n:
            # processed: everything but the bonus, and but the last draft token when all were accepted
            assert sps.processed == len(seq) - (2 if k == n else 1)
        # the cached keys/values are those of seq[:processed]: a probe token through the cache
        # gives the logits of a fresh forward over seq[:processed] + probe
        probe = [40]
        done = sps.processed
        cached = sps.draft.verify(sps.batch, probe, [Draft()]).logits[-1]
        sps.draft.crop(sps.batch, done)
        fresh = sps.draft.model(input_ids=torch.tensor([seq[:done] + probe])).logits[0, -1]
        torch.testing.assert_close(cached, fresh, atol=1e-5, rtol=1e-5)


def run(target, drafter, budget, max_new=48, sampling=None, seed=0):
    dec = Decoder(as_target(target), {EOS}, sampling)
    gen = torch.Generator().manual_seed(seed) if sampling and not sampling.greedy else None
    return dec.generate(drafter, PROMPT, max_new, budget, gen)


def ar_output(target, max_new=48):
    return run(target, methods.get("ar").create(MethodContext(target, None, budget=1)), 1, max_new).output_ids


@pytest.mark.parametrize("budget", [2, 5, 9])
def test_draft_cache_holds_the_accepted_prefix_through_rejections(target, noisy_dir, budget):
    probe = SyncProbe(make_sps(target, noisy_dir, budget))
    g = run(target, probe, budget)
    assert g.output_ids == ar_output(target)
    drafted = [(n, k) for n, k in probe.steps if n]
    assert any(k < n for n, k in drafted), "no rejection: the test did not exercise rollback"
    assert any(k == n for n, k in drafted), "no full acceptance: the test did not exercise catch-up"


def test_full_acceptance_when_the_draft_model_is_the_target(target, target_dir):
    gamma = 4
    probe = SyncProbe(make_sps(target, target_dir, gamma + 1))
    max_new = 1 + 9 * (gamma + 1)  # first token from the prefill, then 9 full steps
    g = run(target, probe, gamma + 1, max_new=max_new)
    assert g.output_ids == ar_output(target, max_new)
    assert EOS not in g.output_ids
    assert g.accept_lengths == [gamma + 1] * 9          # #MAT = gamma + 1
    assert all(k == n == gamma for n, k in probe.steps)


def test_sampled_drafts_carry_the_draft_models_processed_distribution(target, noisy_dir):
    cfg = SamplingConfig(temperature=0.8, top_p=0.9)
    sps = make_sps(target, noisy_dir, 5, sampling=cfg)
    probe = SyncProbe(sps)
    rows_checked = 0
    inner = probe.propose

    @torch.inference_mode()
    def propose(state):
        nonlocal rows_checked
        draft = inner(state)
        if len(draft):
            assert draft.probs.shape == (len(draft), VOCAB)
            logits = sps.draft.model(input_ids=torch.tensor([list(state.ids) + draft.tokens[:-1]])).logits[0]
            want = target_probs(logits[-len(draft):], cfg)
            torch.testing.assert_close(draft.probs, want, atol=1e-5, rtol=1e-4)
            assert all(draft.probs[i, t] > 0 for i, t in enumerate(draft.tokens))  # sampled from the rows
            rows_checked += len(draft)
        return draft

    probe.propose = propose
    g = run(target, probe, 5, sampling=cfg, seed=3)
    assert rows_checked >= 10 and len(g.output_ids) > 1
    drafted = [(n, k) for n, k in probe.steps if n]
    assert any(k < n for n, k in drafted) and any(k > 0 for n, k in drafted)


def test_gamma_follows_block_complexity_and_the_option_can_only_lower_it(target, noisy_dir):
    assert make_sps(target, noisy_dir, 10).gamma == 9
    assert make_sps(target, noisy_dir, 1).gamma == 0
    assert make_sps(target, noisy_dir, 10, gamma=3).gamma == 3
    assert make_sps(target, noisy_dir, 4, gamma="50").gamma == 3
    g = run(target, make_sps(target, noisy_dir, 10, gamma=2), 10)
    assert max(g.draft_sizes) == 2 and max(g.budget_used) == 3
    g = run(target, make_sps(target, noisy_dir, 1), 1, max_new=10)  # BC 1: plain decoding
    assert g.accept_lengths == [1] * 9 and g.output_ids == ar_output(target, 10)


def test_params_label_and_extra_params(target, noisy_dir):
    sps = make_sps(target, noisy_dir, 6)
    assert sps.params() == {"structure": "chain", "gamma": 5, "draft_model": noisy_dir}
    assert sps.extra_params == sum(p.numel() for p in target.parameters())  # same architecture
    assert sps.label().startswith("sps(") and "g=5" in sps.label()
    assert sps.lossless and sps.needs_training and "sps" not in __import__("specbench_cli.run.plan", fromlist=["plan"]).default_methods()


def test_the_draft_model_option_overrides_the_context(target, noisy_dir, target_dir):
    ctx = MethodContext(target, make_tokenizer(), budget=4, draft_model=noisy_dir)
    sps = methods.get("sps").create(ctx, draft_model=target_dir)
    assert sps.params()["draft_model"] == target_dir
    g = run(target, sps, 4, max_new=1 + 4 * 4)
    assert g.accept_lengths == [4] * 4  # the target as its own draft: everything accepted


def test_missing_draft_model_is_a_usage_error(target):
    with pytest.raises(UsageError, match="--draft-model"):
        methods.get("sps").create(MethodContext(target, make_tokenizer(), budget=5))


def test_missing_draft_model_on_the_command_line_exits_2(tiny_model_dir, tmp_path, capsys):
    code, out, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "sps", "--limit", "1",
                          "--max-new-tokens", "4", "--output-dir", str(tmp_path), "--threads", "1", "--no-report"],
                         capsys)
    assert code == 2, (out, err)
    assert "needs a draft model: pass --draft-model" in " ".join(err.split())
    assert "Traceback" not in err


def test_a_draft_model_with_another_tokenizer_is_refused(target, tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    # same words, shuffled ids: the same size of vocabulary, but different token ids
    vocab = make_tokenizer().get_vocab()
    words = sorted(vocab, key=vocab.get)
    shuffled = words[:4] + words[4:][::-1]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(shuffled)}, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    other = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                    bos_token="<|im_start|>", eos_token="<|im_end|>")
    d = tmp_path / "other-tok"
    untied_model(1).save_pretrained(d)
    other.save_pretrained(d)
    with pytest.raises(UsageError, match="different tokenizer"):
        make_sps(target, str(d), 5)


def test_a_draft_model_with_the_same_tokenizer_is_accepted(target, tmp_path):
    sps = make_sps(target, str(save_tiny(tmp_path / "tied", seed=3, layers=1)), 5)
    assert sps.gamma == 4
