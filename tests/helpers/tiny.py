"""A tiny randomly initialised Llama and a word-level tokenizer, built in-process (no download).

Shared by the engine, method, CLI and training tests.
"""

from __future__ import annotations

import torch

VOCAB = 128
WORDS = ("user assistant system the a cat dog sat on mat is big small red blue write poem about sea sun one two "
         "three and or what why how translate to french hello world please story short long python code list "
         "number sum of in it this that").split()
SPECIAL = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
            "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
EOS = 3


def make_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    names = SPECIAL + WORDS + [f"w{i}" for i in range(VOCAB - len(SPECIAL) - len(WORDS))]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(names)}, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<|im_start|>", eos_token="<|im_end|>")
    fast.chat_template = TEMPLATE
    assert len(fast) == VOCAB
    return fast


def make_model(seed: int = 0, layers: int = 2, hidden: int = 32, dropout: float = 0.0, sharpen: float = 8.0,
               dtype: torch.dtype = torch.float32, tie: bool = False):
    """Random Llama; `sharpen` scales the final norm so logits are peaked (std ~1, not ~0.1).

    Untied by default: a tied random model greedily repeats its last token forever, so every
    drafter looks perfect on it. Untied, greedy outputs wander and then fall into cycles of
    several tokens, which gives drafters both rejections and acceptances."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=tie, bos_token_id=2, eos_token_id=EOS, pad_token_id=1,
                      attention_dropout=dropout)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.norm.weight.mul_(sharpen)
    return model.to(dtype).eval()


def save_noisy_copy(model, directory, scale: float, seed=None):
    """Save `model` with Gaussian noise on every weight (`scale` x each tensor's std) and the tiny
    tokenizer as a draft model folder: it agrees with the model often but not always (acceptances
    and rejections). `seed` reseeds torch first (None: the current stream goes on). Returns the folder."""
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale * p.std().clamp_min(1e-3))
    model.save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return str(directory)


def save_tiny(directory, seed: int = 0, **kwargs):
    """Save a tiny model + tokenizer as an HF folder loadable by `load_model`."""
    make_model(seed, **kwargs).save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return directory
