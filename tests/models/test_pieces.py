"""The text of each generated token (`models/pieces.py`): one piece per id, joined they give the
decoded answer, and a character split over byte tokens goes whole to the token that completes it."""

from __future__ import annotations

import pytest

from specbench_cli.models.pieces import token_pieces

TEXTS = ["plain words here", "café crème brûlée", "emoji 🙂 and 🚀 too", "日本語のテキスト", "tabs\tand\nnewlines  "]


@pytest.fixture(scope="module")
def byte_tokenizer():
    """A byte-level BPE trained here on a few English words: accented letters, CJK and emoji stay
    split over several byte tokens, as rare characters are in real tokenizers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|end|>"])
    tok.train_from_iterator(["plain words here and there", "the words are plain"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>")


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_join_to_the_decoded_text(byte_tokenizer, text):
    ids = byte_tokenizer.encode(text) + [byte_tokenizer.eos_token_id]
    pieces = token_pieces(byte_tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == text + "<|end|>"
    assert not any("\ufffd" in p for p in pieces)  # no half characters


def test_a_split_character_goes_to_the_token_that_completes_it(byte_tokenizer):
    ids = byte_tokenizer.encode("🙂")
    assert len(ids) > 1  # the emoji is several byte tokens here
    assert token_pieces(byte_tokenizer, ids) == [""] * (len(ids) - 1) + ["🙂"]


def test_an_answer_cut_inside_a_character_keeps_every_token(byte_tokenizer):
    ids = byte_tokenizer.encode("ok 🙂")[:-1]  # the cap fell inside the emoji
    pieces = token_pieces(byte_tokenizer, ids)
    assert len(pieces) == len(ids) and "".join(pieces).startswith("ok ")


def test_word_level_pieces_keep_their_spaces(tiny_tok):
    ids = tiny_tok.encode("the cat sat on the mat", add_special_tokens=False)
    pieces = token_pieces(tiny_tok, ids)
    assert "".join(pieces) == tiny_tok.decode(ids) and pieces[1] == " cat"
