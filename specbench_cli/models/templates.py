"""Prompt templates: how a conversation becomes the prompt's text, by name.

Acceptance rates depend on the prompt, so a result is comparable with Spec-Bench's leaderboard
only when the questions are formatted as Spec-Bench formats them: fastchat's `vicuna` template for
Vicuna-v1.3, whose tokenizer has no chat template of its own.

- `auto`: the tokenizer's chat template; without one, the turns joined by blank lines (`none`).
- `vicuna`: fastchat's `vicuna_v1.1` (Spec-Bench): the system line, then `USER: q ASSISTANT: a</s>`
  per finished turn, ending in `ASSISTANT:`.
- `llama-2`: `[INST] q [/INST] a </s><s>[INST] ...` (no system prompt).
- `llama-3`: header blocks `<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>`.
- `chatml`: `<|im_start|>role\\n...<|im_end|>\\n`, ending in `<|im_start|>assistant\\n`.
- `none`: the turns joined by blank lines, plus a trailing blank line.
- `FILE.jinja`: a Jinja chat template (transformers renders it in its sandboxed environment).

Named templates are written here from the formats' public descriptions; the text is tokenized
with the tokenizer's own special tokens (its BOS, where it adds one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError

VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                 "The assistant gives helpful, detailed, and polite answers to the user's questions.")
NAMES = ("auto", "vicuna", "llama-2", "llama-3", "chatml", "none")


def check_template(value: Any) -> Any:
    """A known name or an existing `.jinja` file; UsageError otherwise (no model needed)."""
    if value in NAMES:
        return value
    if not isinstance(value, str) or not value.endswith(".jinja"):
        raise UsageError(f"--prompt-template must be one of {', '.join(NAMES)} or a .jinja file (got '{value}')")
    p = Path(value).expanduser()
    try:
        p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--prompt-template: file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--prompt-template: cannot read {p} as UTF-8 text ({e})") from None
    return value


def _vicuna(messages: list[dict]) -> str:
    out = VICUNA_SYSTEM + " "
    for m in messages:
        if m["role"] == "user":
            out += f"USER: {m['content']} "
        elif m["role"] == "assistant":
            out += f"ASSISTANT: {m['content']}</s>"
    return out + "ASSISTANT:"


def _llama2(messages: list[dict]) -> str:
    out = ""
    for m in messages:
        if m["role"] == "user":
            out += f"[INST] {m['content'].strip()} [/INST]"
        elif m["role"] == "assistant":
            out += f" {m['content'].strip()} </s><s>"
    return out


def _llama3(messages: list[dict]) -> str:
    out = "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
                  for m in messages)
    return out + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def _chatml(messages: list[dict]) -> str:
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + "<|im_start|>assistant\n"


def _plain(messages: list[dict]) -> str:
    return "\n\n".join(m["content"] for m in messages) + "\n\n"


RENDER = {"vicuna": _vicuna, "llama-2": _llama2, "llama-3": _llama3, "chatml": _chatml, "none": _plain}


def encode(tokenizer: Any, messages: list[dict], template: str = "auto") -> list[int]:
    """Conversation -> prompt ids under `template` (generation prompt included)."""
    if template == "auto":
        template = "chat" if getattr(tokenizer, "chat_template", None) else "none"
    if template == "chat" or template.endswith(".jinja"):
        kwargs = {} if template == "chat" else {
            "chat_template": Path(template).expanduser().read_text(encoding="utf-8")}
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
        if hasattr(out, "keys"):
            out = out["input_ids"]
        return list(out)
    return list(tokenizer(RENDER[template](messages))["input_ids"])
