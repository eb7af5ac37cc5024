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

A `.jinja` file is checked when the option is, before any model loads (`check_template`): a
regular file (a FIFO or device is refused by type) of at most `MAX_TEMPLATE_BYTES`, parsed and
rendered on a sample conversation in the environment transformers builds (sandboxed, with
`raise_exception`, `tojson`, `loop controls`, `{% generation %}`), in a child process capped at
`RENDER_SECONDS` of wall time and `RENDER_MEMORY_MB` of memory. A syntax error, a raised
exception, `{% include %}` (there is no loader), a blocked sandbox escape, an empty result or
one longer than `MAX_PROMPT_CHARS` characters is one line naming the file (and line), exit 2.
At run time transformers renders the real conversations; a prompt that still renders to no
tokens is refused there too (`encode`).

Named templates are written here from the formats' public descriptions; the text is tokenized
with the tokenizer's own special tokens (its BOS, where it adds one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from specbench_cli.errors import UsageError, check_input_file
from specbench_cli.jsonl import read_text

VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                 "The assistant gives helpful, detailed, and polite answers to the user's questions.")
NAMES = ("auto", "vicuna", "llama-2", "llama-3", "chatml", "none")


MAX_TEMPLATE_BYTES = 1 << 20      # a chat template file (real ones are a few KB)
MAX_PROMPT_CHARS = 100_000        # the sample conversation's prompt (real templates render < 2,000)
RENDER_SECONDS = 5.0              # wall time of the sample render, the child's start included
RENDER_MEMORY_MB = 1024           # address space of the child that renders it

# What a template is checked on: two finished turns and a third question, with the special
# tokens transformers passes as variables (placeholders: the tokenizer is not loaded yet).
SAMPLE = [{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4."},
          {"role": "user", "content": "And 3 + 3?"}]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

# Runs in a child (`python -I -c`): the environment of transformers' `_compile_jinja_template`,
# plus a cap on `*` repetition so one expression cannot build a huge string or list.
_RENDER = r"""
import json, sys
from datetime import datetime
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

spec = json.loads(sys.stdin.read())
CAP = spec["cap"]


class GenerationTag(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class Env(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context, operator, left, right):
        if operator == "*" and isinstance(left, (str, list, tuple)) and isinstance(right, int) \
                and len(left) * right > CAP or operator == "*" and isinstance(right, (str, list, tuple)) \
                and isinstance(left, int) and len(right) * left > CAP:
            raise jinja2.exceptions.SecurityError(f"a repetition longer than {CAP} characters")
        if operator == "**" and isinstance(right, int) and abs(right) > 1000:
            raise jinja2.exceptions.SecurityError("a power above 1000")
        return super().call_binop(context, operator, left, right)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


env = Env(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
try:
    template = env.from_string(spec["text"])
    size, parts = 0, []
    for part in template.generate(messages=spec["messages"], add_generation_prompt=True, **spec["special"]):
        size += len(part)
        if size > CAP:
            raise OverflowError(f"renders more than {CAP} characters")
        parts.append(part)
    out = {"ok": True, "chars": size, "blank": not "".join(parts).strip()}
except jinja2.exceptions.TemplateSyntaxError as e:
    out = {"ok": False, "line": e.lineno, "error": f"syntax error: {e.message}"}
except MemoryError:
    parts = None
    out = {"ok": False, "line": None, "error": f"rendering a sample conversation needs more than {spec['mb']} MB"}
except Exception as e:
    line = None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    out = {"ok": False, "line": line, "error": f"{type(e).__name__}: {e}"[:300]}
sys.stdout.write(json.dumps(out))
"""

_checked: dict[tuple, None] = {}


def _limit_memory() -> None:  # in the child, before it starts
    import resource

    cap = RENDER_MEMORY_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def check_jinja(path: Path, text: str) -> None:
    """Parse and render `text` on `SAMPLE` as transformers would, in a bounded child process;
    UsageError naming `path` (and the line) when it fails, is blank, or is too long."""
    where = f"--prompt-template {path}"
    spec = json.dumps({"text": text, "messages": SAMPLE, "special": SPECIAL, "cap": MAX_PROMPT_CHARS,
                       "mb": RENDER_MEMORY_MB})
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", _RENDER], input=spec, capture_output=True, text=True,
                              timeout=RENDER_SECONDS, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                              preexec_fn=_limit_memory if sys.platform.startswith("linux") else None)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{where}: rendering a sample conversation took more than {RENDER_SECONDS:g} s") from None
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        if "MemoryError" in proc.stderr:
            tail = f"it needs more than {RENDER_MEMORY_MB} MB"
        if "No module named 'jinja2'" in proc.stderr:
            raise UsageError(f"{where}: chat templates need jinja2 (pip install jinja2)") from None
        raise UsageError(f"{where}: rendering a sample conversation failed ({tail[:200]})") from None
    if not result["ok"]:
        line = f":{result['line']}" if result.get("line") else ""
        raise UsageError(f"{where}{line}: {result['error']}")
    if result["blank"]:
        raise UsageError(f"{where}: renders an empty prompt for a sample conversation")


def check_template(value: Any) -> Any:
    """A known name, or a `.jinja` file that parses and renders (see the module doc); UsageError
    otherwise. No model and no torch: it runs with the other option checks."""
    if value in NAMES:
        return value
    if not isinstance(value, str) or not value.endswith(".jinja"):
        raise UsageError(f"--prompt-template must be one of {', '.join(NAMES)} or a .jinja file (got '{value}')")
    p = check_input_file(value, "--prompt-template:")
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key in _checked:
        return value
    text = read_text(p, "--prompt-template", max_bytes=MAX_TEMPLATE_BYTES)  # the guarded reader (jsonl.py)
    check_jinja(p, text)
    _checked[key] = None
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
        ids = list(out)
    else:
        ids = list(tokenizer(RENDER[template](messages))["input_ids"])
    if not ids:
        raise UsageError(f"--prompt-template {template} renders no tokens for the conversation starting "
                         f"{str(messages[0].get('content', ''))[:40]!r}")
    return ids
