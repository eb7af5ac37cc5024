"""Streamed completions from a server that answers many requests at once: llama-server's native
`POST /completion` and the OpenAI-compatible `POST /v1/completions` (vLLM, SGLang, any other).

Every request sends the prompt as token ids, greedy, with the point's cap, `stream` on, and is
read as server-sent events as they arrive: each token's arrival time (`time.perf_counter`, on
the load point's clock), the first token's, the end, the token ids where the server streams them
and what the server reports about the request (llama.cpp's `timings`: draft and accepted tokens;
OpenAI's `usage`).

- llama.cpp: one event per token (`tokens`: [id], `tokens_predicted`: the count so far), then a
  last one with `stop` true and `timings`. A token whose text ends inside a UTF-8 character is
  held back and sent with the next one's event, its id missing: the count says so, the times of
  both tokens are the later event's, and the record's ids are marked incomplete (`ids`).
- OpenAI: one event per engine step (several tokens when speculation accepted several), the ids
  from vLLM's `token_ids` or the logprobs' `token_id:N`; without ids, the token counts from
  vLLM's per-chunk usage (`continuous_usage_stats`), else from the final `usage`, and then the
  tokens' arrival times are unknown (the record says so).

Nothing a server sends is trusted as it comes: the whole exchange has a wall-clock deadline (a
server that stalls, or drips a byte a second, is cut off at it: servers/server.py's deadline
shuts the socket), the stream's bytes are capped by the request's size and each line at
`LINE_BYTES`, JSON nesting is bounded, token ids must be ids of the vocabulary and counts whole
and within the cap. Any of these, a status other than 200, a connection that drops before the
last event, or an event that is not one of these APIs', is a `StreamError` (one line) that the
backend turns into the request's error row.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from specbench_cli.jsonl import too_deep
from specbench_cli.servers.engine_method import checked_timings
from specbench_cli.servers.server import EngineError, _Deadline, _watched, reply_cap

LINE_BYTES = 1 << 20      # one server-sent event's line
ERROR_BYTES = 2048        # what an error status's body may show


class StreamError(Exception):
    """One request failed (a one-line reason)."""


@dataclass
class Completion:
    """What one streamed request gave (times in seconds on the point's clock)."""

    send_s: float = 0.0
    first_token_s: Optional[float] = None
    end_s: Optional[float] = None
    token_times: Optional[list[float]] = field(default_factory=list)  # None: the server's stream did not say
    output_ids: Optional[list[int]] = field(default_factory=list)     # None: the server sent no ids
    new_tokens: int = 0
    missing_ids: int = 0          # tokens counted whose ids the stream did not carry
    timings: dict = field(default_factory=dict)   # llama.cpp's, checked
    usage: dict = field(default_factory=dict)     # OpenAI's final usage
    finish: str = ""              # why it ended (stop_type / finish_reason), as the server says
    tokens_from: str = "ids"      # "ids" | "counts" (per-chunk usage) | "usage" (the final count only)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamError(f"{what} is {str(value)[:40]!r}, not a count")
    return value


def _ids(value: Any, what: str, vocab: Optional[int]) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise StreamError(f"{what} is not a list of token ids")
    bad = [t for t in value if t < 0 or (vocab is not None and t >= vocab)]
    if bad:
        raise StreamError(f"token id {bad[0]} in {what} is outside the vocabulary ({vocab})")
    return value


def post_stream(url: str, body: dict, timeout: float, max_bytes: int,
                on_data: Callable[[float, Any], bool]) -> None:
    """POST `body` as JSON to `url` and hand each server-sent event's `data` to `on_data(arrival
    time, parsed JSON or the text '[DONE]')`, which returns False to stop reading. StreamError for a
    status other than 200, no whole exchange within `timeout` s, more than `max_bytes` bytes, a
    line past LINE_BYTES, a line that is not a server-sent event, data that is not JSON, or a
    connection that fails. Returns when the server ends the stream or `on_data` stops it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise StreamError(f"{url[:120]}: not an http(s) URL")
    base = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    deadline = _Deadline(timeout)
    conn = _watched(base, deadline)(parts.hostname, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    late = f"no complete answer within {timeout:g} s (--engine-timeout)"
    try:
        data = json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json",
                                                       "Accept": "text/event-stream"})
        reply = conn.getresponse()
        if reply.status != 200:
            detail = " ".join(reply.read(ERROR_BYTES).decode("utf-8", "replace").split())[:300]
            raise StreamError(f"HTTP {reply.status} {detail}".strip())
        size = 0
        while True:
            line = reply.readline(LINE_BYTES + 1)
            now = time.perf_counter()
            if not line:
                break
            size += len(line)
            if size > max_bytes:
                raise StreamError(f"the stream is larger than {max_bytes:,} bytes; refused")
            if len(line) > LINE_BYTES:
                raise StreamError(f"a line of the stream is longer than {LINE_BYTES:,} bytes; refused")
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if not text or text.startswith(":"):          # an event's end, a comment (a keep-alive ping)
                continue
            name, sep, value = text.partition(":")
            if not sep or name not in ("data", "event", "id", "retry"):
                raise StreamError(f"garbage in the stream (not a server-sent event): {text[:80]!r}")
            if name != "data":
                continue
            value = value[1:] if value.startswith(" ") else value
            if value.strip() == "[DONE]":
                parsed: Any = "[DONE]"
            else:
                if too_deep(value):
                    raise StreamError("garbage in the stream (JSON nested too deeply)")
                try:
                    parsed = json.loads(value)
                except (ValueError, RecursionError):
                    raise StreamError(f"garbage in the stream (not JSON): {value[:80]!r}") from None
            if not on_data(now, parsed):
                break
        if deadline.expired:
            raise StreamError(late)
    except StreamError:
        if deadline.expired:
            raise StreamError(late) from None
        raise
    except (OSError, http.client.HTTPException, EngineError) as e:
        if deadline.expired or isinstance(e, (TimeoutError, socket.timeout)):
            raise StreamError(late) from None
        raise StreamError(f"the connection failed: {type(e).__name__}: {str(e)[:200]}".rstrip(": ")) from None
    finally:
        deadline.finish()
        with contextlib.suppress(Exception):
            conn.close()


# ----------------------------------------------------------------------------- llama-server

LLAMA_TIMING_KEYS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "draft_n", "draft_n_accepted")


def llama_body(prompt_ids: list[int], max_new_tokens: int) -> dict:
    return {"prompt": list(prompt_ids), "n_predict": max_new_tokens, "temperature": 0, "top_k": 1,
            "cache_prompt": False, "stream": True}


def complete_llama(url: str, prompt_ids: list[int], max_new_tokens: int, timeout: float, clock0: float,
                   vocab: Optional[int] = None) -> Completion:
    """One streamed `POST URL/completion` (module doc); times relative to `clock0`."""
    got = Completion(send_s=time.perf_counter() - clock0)
    state = {"stopped": False}
    ids, times = got.output_ids, got.token_times
    assert ids is not None and times is not None

    def on_data(now: float, event: Any) -> bool:
        if event == "[DONE]":
            return False
        if not isinstance(event, dict):
            raise StreamError(f"garbage in the stream (an event that is not an object: {str(event)[:60]!r})")
        if "error" in event:
            raise StreamError(f"the server answered an error: {json.dumps(event['error'])[:200]}")
        tokens = _ids(event.get("tokens", []), "an event's tokens", vocab)
        counted = got.new_tokens
        if "tokens_predicted" in event:
            total = _count(event["tokens_predicted"], "tokens_predicted")
            if total < counted or total - counted < len(tokens):
                raise StreamError(f"tokens_predicted is {total} after {counted} tokens and {len(tokens)} more")
            k = total - counted
        else:
            k = len(tokens)
        if counted + k > max_new_tokens:
            raise StreamError(f"{counted + k} tokens for a cap of {max_new_tokens}")
        if k:
            got.missing_ids += k - len(tokens)
            ids.extend(tokens)
            times.extend([now - clock0] * k)
            got.new_tokens = counted + k
            if got.first_token_s is None:
                got.first_token_s = now - clock0
        if event.get("stop") is True:
            timings = event.get("timings")
            if isinstance(timings, dict):
                try:
                    got.timings = checked_timings({k: timings[k] for k in LLAMA_TIMING_KEYS if k in timings})
                except EngineError as e:
                    raise StreamError(str(e)) from None
            got.finish = str(event.get("stop_type", ""))[:40]
            got.end_s = now - clock0
            state["stopped"] = True
            return False
        return True

    post_stream(url.rstrip("/") + "/completion", llama_body(prompt_ids, max_new_tokens), timeout,
                reply_cap(len(prompt_ids) + max_new_tokens), on_data)
    if not state["stopped"]:
        raise StreamError("the stream ended before its last event (the connection was dropped)")
    predicted = got.timings.get("predicted_n")
    if predicted is not None and predicted != got.new_tokens:
        raise StreamError(f"{got.new_tokens} tokens streamed but {predicted} counted (timings.predicted_n)")
    if got.missing_ids:
        got.output_ids = None
    return got


# ----------------------------------------------------------------------------- OpenAI-compatible

def openai_body(model: str, prompt_ids: list[int], max_new_tokens: int, vllm: bool) -> dict:
    """A streamed /v1/completions request; `vllm` adds vLLM's own fields (ids back, per-chunk usage)."""
    body: dict[str, Any] = {"model": model, "prompt": list(prompt_ids), "max_tokens": max_new_tokens,
                            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if vllm:
        body["stream_options"]["continuous_usage_stats"] = True
        body.update({"top_k": 1, "return_token_ids": True, "logprobs": 0, "return_tokens_as_token_ids": True,
                     "skip_special_tokens": False})
    return body


def _choice_ids(choice: dict, vocab: Optional[int]) -> Optional[list[int]]:
    """The ids a streamed choice carries: `token_ids`, else the logprobs' `token_id:N` tokens; None
    when it carries neither."""
    if "token_ids" in choice and choice["token_ids"] is not None:
        return _ids(choice["token_ids"], "a chunk's token_ids", vocab)
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if isinstance(tokens, list) and tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        try:
            return _ids([int(t.split(":", 1)[1]) for t in tokens], "a chunk's logprobs tokens", vocab)
        except ValueError:
            return None
    return None


def complete_openai(url: str, model: str, prompt_ids: list[int], max_new_tokens: int, timeout: float,
                    clock0: float, vocab: Optional[int] = None, vllm: bool = False) -> Completion:
    """One streamed `POST URL/v1/completions` (module doc); times relative to `clock0`."""
    got = Completion(send_s=time.perf_counter() - clock0)
    state: dict[str, Any] = {"done": False, "mode": None, "by_usage": False, "text_chunks": 0}
    ids, times = got.output_ids, got.token_times
    assert ids is not None and times is not None

    def on_data(now: float, event: Any) -> bool:
        if event == "[DONE]":
            state["done"] = True
            return False
        if not isinstance(event, dict):
            raise StreamError(f"garbage in the stream (an event that is not an object: {str(event)[:60]!r})")
        if "error" in event:
            raise StreamError(f"the server answered an error: {json.dumps(event['error'])[:200]}")
        usage = event.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise StreamError("a chunk's usage is not an object")
        so_far = (_count(usage["completion_tokens"], "usage.completion_tokens")
                  if usage and "completion_tokens" in usage else None)
        choices = event.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise StreamError("a chunk's choices are not a list of objects")
        if not choices:
            if usage is not None:   # the last chunk: the request's usage
                got.usage = {k: _count(v, f"usage.{k}") for k, v in usage.items()
                             if k in ("prompt_tokens", "completion_tokens", "total_tokens")}
            return True
        choice, counted, k = choices[0], got.new_tokens, 0
        chunk_ids, text = _choice_ids(choice, vocab), choice.get("text") or ""
        if chunk_ids is not None:
            if state["mode"] == "text":
                raise StreamError("a chunk carries token ids after chunks without them")
            state["mode"], k = "ids", len(chunk_ids)
            ids.extend(chunk_ids)
        elif text:
            if state["mode"] == "ids":
                raise StreamError("a chunk carries text without token ids after chunks with them")
            state["mode"] = "text"
            state["text_chunks"] += 1
        if state["mode"] != "ids" and so_far is not None:   # vLLM's per-chunk usage counts the tokens
            if so_far < counted:
                raise StreamError("usage.completion_tokens went down during the stream")
            k, state["by_usage"] = so_far - counted, True
        if counted + k > max_new_tokens:
            raise StreamError(f"{counted + k} tokens for a cap of {max_new_tokens}")
        if k:
            times.extend([now - clock0] * k)
            got.new_tokens = counted + k
        if (k or text) and got.first_token_s is None:
            got.first_token_s = now - clock0
        if choice.get("finish_reason"):
            got.finish = str(choice["finish_reason"])[:40]
            got.end_s = now - clock0
        return True

    post_stream(url.rstrip("/") + "/v1/completions", openai_body(model, prompt_ids, max_new_tokens, vllm), timeout,
                reply_cap(len(prompt_ids) + max_new_tokens), on_data)
    if not state["done"] and not got.finish:
        raise StreamError("the stream ended before its last event (the connection was dropped)")
    total = got.usage.get("completion_tokens")
    if state["mode"] == "ids":
        if total is not None and total != got.new_tokens:
            raise StreamError(f"{got.new_tokens} token ids streamed but {total} counted (usage.completion_tokens)")
    elif state["mode"] == "text" or total:
        got.output_ids = None
        if state["by_usage"]:
            got.tokens_from = "counts"
        else:           # no count per chunk: the total from usage (else the chunks), arrival times unknown
            got.tokens_from, got.token_times = ("usage", None) if total is not None else ("chunks", None)
            got.new_tokens = total if total is not None else state["text_chunks"]
            if got.new_tokens > max_new_tokens:
                raise StreamError(f"{got.new_tokens} tokens for a cap of {max_new_tokens}")
    if got.end_s is None:
        got.end_s = time.perf_counter() - clock0
    return got

