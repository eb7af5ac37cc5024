"""Any OpenAI-compatible server someone else runs (SGLang, TensorRT-LLM's trtllm-serve, vLLM,
llama-server's /v1 routes) as methods: `openai:ar` (a server with speculation off, the baseline)
and `openai:spec` (a server with speculation on, however that server does it). The names only
label what the servers at their URLs run, so each needs `--engine-url openai:ar=URL` and
`--engine-url openai:spec=URL`; specbench starts nothing for them.

In `specbench run` each question is one `POST /v1/completions` as for `vllm:*` (servers/vllm.py:
the prompt as token ids, greedy, the generated ids asked back). `specbench load` streams the same
request (specbench_cli/load/http.py) and reads token ids where the server returns them, else
counts the tokens from the stream's usage and says so in the records.
"""

from __future__ import annotations

from specbench_cli.decoding.drafter import Structure
from specbench_cli.servers.engine_method import EngineSettings, no_url
from specbench_cli.servers.vllm import VllmMethod


class OpenAIMethod(VllmMethod):
    engine = "openai"
    metrics_prefix = "vllm"   # servers that export vLLM's spec_decode counters; others export none

    def plan(self) -> None:
        return None           # the server's own configuration sets its speculation, not the BC

    def configure(self, settings: EngineSettings) -> None:
        self.settings = settings
        if not settings.url:
            raise no_url(self.name, self.engine)

    def speculative_config(self):
        return None

    def params(self) -> dict:
        return {**super().params(), "server": "openai-compatible"}


class OpenAIAR(OpenAIMethod):
    name = "openai:ar"
    summary = "an OpenAI-compatible server with speculation off (--engine-url openai:ar=URL): the baseline of openai:*"
    structure = Structure.NONE


class OpenAISpec(OpenAIMethod):
    name = "openai:spec"
    summary = "an OpenAI-compatible server with its own speculation on (--engine-url openai:spec=URL)"
