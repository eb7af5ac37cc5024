"""The text of each generated token, for views that colour an answer token by token.

`tokenizer.decode([id])` alone is wrong in two ways: a character that a byte-level tokenizer
splits over two tokens decodes to U+FFFD in each, and SentencePiece tokenizers drop the leading
space of a sequence's first token. So each token's text is the growth of a short decoded window
ending at it: a token that ends inside a character gets "" and the token that completes the
character gets all of it. Joined, the pieces give the decoded output (special tokens included).
"""

from __future__ import annotations

from typing import Any, Sequence

CONTEXT = 6            # tokens of left context a window keeps: enough for any tokenizer's merge rules
MAX_CHARACTER_TOKENS = 4  # a UTF-8 character spans at most four byte tokens
INCOMPLETE = "\ufffd"


def token_pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """One string per id; `"".join(result)` equals `tokenizer.decode(ids)` without skipping
    special tokens (up to the tokenizer's own clean-up of spaces, which is turned off)."""
    ids = [int(i) for i in ids]

    def decode(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    pieces: list[str] = []
    pending = 0  # the first token whose text has not been handed out yet
    for i in range(len(ids)):
        start = max(0, pending - CONTEXT)
        head = decode(ids[start:pending])
        text = decode(ids[start:i + 1])
        if text.endswith(INCOMPLETE) and i + 1 < len(ids) and i + 1 - pending < MAX_CHARACTER_TOKENS:
            pieces.append("")  # the character goes on in the next token
            continue
        pieces.append(text[len(head):] if text.startswith(head) else decode(ids[pending:i + 1]))
        pending = i + 1
    return pieces
