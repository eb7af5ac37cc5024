"""vLLM's own speculation as methods, on a server someone else runs (`--engine-url`): `vllm:ar`,
`vllm:ngram`, `vllm:suffix`, `vllm:eagle3`, `vllm:draft_model`.

vLLM fixes its `speculative_config` when the server starts, so specbench cannot switch it: the
method name only labels what the server at that URL runs (`--engine-url vllm:ngram=URL`), and
each configuration is a server of its own. Any OpenAI-compatible server that returns token ids
(SGLang, trtllm-serve) can be reached the same way under these names.

Each question is one `POST /v1/completions` with the prompt as token ids, `max_tokens` = the cap,
temperature 0 and the generated token ids asked back (`return_token_ids`, else the logprobs'
`token_id:N` tokens); counters are the `vllm:spec_decode_*` series of `/metrics` before and after
the request (engines/method.py), so nothing else may use the server meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from specbench_cli.engine.drafter import Structure
from specbench_cli.engines.method import EngineMethod, EngineSettings, Reply, no_url
from specbench_cli.engines.server import EngineError, request_json


@dataclass
class UrlOptions:
    served_model: str = ""   # the server's model name (default: the first of its /v1/models)


class VllmMethod(EngineMethod):
    engine = "vllm"
    metrics_prefix = "vllm"
    Options = UrlOptions
    _model_name: Optional[str] = None

    def configure(self, settings: EngineSettings) -> None:
        super().configure(settings)
        if not settings.url:
            raise no_url(self.name, self.engine)

    @property
    def url(self) -> str:
        return str(self.settings.url)

    def served(self) -> str:
        if self.opts.served_model:
            return self.opts.served_model
        if self._model_name is None:
            listing = request_json(self.url + "/v1/models", None, self.settings.timeout)
            data = listing.get("data") if isinstance(listing, dict) else None
            if not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise EngineError(f"{self.url}/v1/models lists no model")
            self._model_name = str(data[0]["id"])
        return self._model_name

    def request(self, prompt_ids: list[int], max_new_tokens: int) -> Reply:
        body = {"model": self.served(), "prompt": prompt_ids, "max_tokens": max_new_tokens, "temperature": 0,
                "top_k": 1, "stream": False, "return_token_ids": True, "logprobs": 0,
                "return_tokens_as_token_ids": True, "skip_special_tokens": False}
        reply = request_json(self.url + "/v1/completions", body, self.settings.timeout)
        choice = (reply.get("choices") or [None])[0] if isinstance(reply, dict) else None
        if not isinstance(choice, dict):
            raise EngineError(f"{self.name}: the reply has no choices (got {str(reply)[:120]})")
        tokens = token_ids(choice)
        used = (reply.get("usage") or {}).get("completion_tokens")
        if isinstance(used, int) and isinstance(tokens, list) and used != len(tokens):
            raise EngineError(f"{self.name}: {len(tokens)} token ids returned but {used} counted (usage)")
        return Reply(tokens)


def token_ids(choice: dict) -> Any:
    """The generated ids of an OpenAI completion choice: `token_ids` (vLLM's return_token_ids), else
    the logprobs' tokens written as `token_id:N`; EngineError when neither is there."""
    if isinstance(choice.get("token_ids"), list):
        return choice["token_ids"]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        try:
            return [int(t.split(":", 1)[1]) for t in tokens]
        except ValueError:
            pass
    raise EngineError("the completion carries no token ids (vLLM: return_token_ids; others: logprobs with "
                      "return_tokens_as_token_ids)")


class VllmAR(VllmMethod):
    name = "vllm:ar"
    summary = "vLLM server without speculative_config: the baseline of the vllm:* methods (--engine-url)"
    structure = Structure.NONE


class VllmNgram(VllmMethod):
    name = "vllm:ngram"
    summary = "vLLM's n-gram prompt lookup (speculative_config method ngram), by --engine-url"


class VllmSuffix(VllmMethod):
    name = "vllm:suffix"
    summary = "vLLM's suffix decoding (speculative_config method suffix, arctic-inference), by --engine-url"


class VllmEagle3(VllmMethod):
    name = "vllm:eagle3"
    summary = "vLLM's EAGLE-3 heads (speculative_config method eagle3), by --engine-url"


class VllmDraftModel(VllmMethod):
    name = "vllm:draft_model"
    summary = "vLLM with a draft model (speculative_config method draft_model), by --engine-url"
