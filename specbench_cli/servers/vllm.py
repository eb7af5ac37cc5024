"""vLLM's own speculation as methods: `vllm:ar`, `vllm:ngram`, `vllm:suffix`, `vllm:eagle3`,
`vllm:dflash`, `vllm:draft_model`.

vLLM fixes its `speculative_config` when the server starts, so each method (each configuration)
is a server of its own. Without `--engine-url` specbench starts it: `PYTHON -m
vllm.entrypoints.openai.api_server` (PYTHON from locate.py: vLLM lives in a virtual
environment of its own) on the run's model (a GGUF is given as the float32 folder specbench
converts it to, the one its own `hf` target loads), `--dtype` the run's, the method's
`--speculative-config` with BC - 1 draft tokens, on a free loopback port, kept up for the run and
stopped on every way out (servers/server.py). With `--engine-url vllm:NAME=URL` the name only
labels what the server at that URL runs; any OpenAI-compatible server that returns token ids
(SGLang, trtllm-serve) can be reached that way under these names.

Each question is one `POST /v1/completions` with the prompt as token ids, `max_tokens` = the cap,
temperature 0 and the generated token ids asked back (`return_token_ids`, else the logprobs'
`token_id:N` tokens); counters are the `vllm:spec_decode_*` series of `/metrics` before and after
the request (servers/engine_method.py), so nothing else may use the server meanwhile.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from specbench_cli.decoding.drafter import Structure
from specbench_cli.errors import UsageError
from specbench_cli.options import opt
from specbench_cli.servers.engine_method import EngineMethod, EngineSettings, Reply
from specbench_cli.servers.server import EngineError, reply_cap, request_json

SERVED_NAME = "specbench-target"


@dataclass
class VllmOptions:
    served_model: str = ""                               # the server's model name (default: the first of its /v1/models)
    eager: bool = True                                   # --enforce-eager (CUDA graphs / compiling off: minutes on a CPU)
    max_model_len: int = opt(4096, lo=16, hi=1 << 22)    # --max-model-len
    kv_cache_gib: int = opt(2, lo=1, hi=4096)            # VLLM_CPU_KVCACHE_SPACE (vLLM's CPU build only)
    gpu_memory: Optional[float] = opt(None, lo=0.01, hi=1.0)  # --gpu-memory-utilization (one GPU shared by servers)
    args: str = opt("", from_folder=False)               # more server arguments, as a shell would split them
                                                         # (never from a run folder: --resume takes them from -o)


@dataclass
class LookupOptions(VllmOptions):
    lookup_max: int = opt(3, lo=1, hi=1024)              # prompt_lookup_max
    lookup_min: int = opt(1, lo=1, hi=1024)              # prompt_lookup_min


@dataclass
class ModelOptions(VllmOptions):
    draft: str = ""                                      # the draft model / EAGLE-3 heads folder (default --draft-model)


class VllmMethod(EngineMethod):
    engine = "vllm"
    metrics_prefix = "vllm"
    Options: ClassVar[type] = VllmOptions
    spec_method: ClassVar[str] = ""                      # speculative_config's method ("": none)
    _model_name: Optional[str] = None
    python: Optional[str] = None

    def plan(self) -> None:
        if self.spec_method and self.ctx.budget < 2:
            raise UsageError(f"{self.name} drafts BC - 1 tokens: give a block complexity of at least 2 (got "
                             f"{self.ctx.budget})")

    def configure(self, settings: EngineSettings) -> None:
        from specbench_cli.locate import require_vllm_python
        from specbench_cli.models.load import resolve

        super().configure(settings)
        if settings.url:
            return
        self.python = str(require_vllm_python(settings.engine_bin))   # missing: one line, exit 2
        self.model_kind, self.model_location = resolve(settings.model)

    def speculative_config(self) -> Optional[dict]:
        return None

    def model_folder(self) -> str:
        """What vLLM loads: the run's folder or hub id; a GGUF as specbench's float32 conversion of it."""
        if self.model_kind == "gguf":
            from specbench_cli.models.load import converted_gguf_dir

            return str(converted_gguf_dir(self.model_location))
        return self.model_location

    def server_argv(self) -> list[str]:
        o = self.opts
        argv = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_folder(),
                "--served-model-name", SERVED_NAME, "--dtype", self.settings.dtype, "--seed", str(self.settings.seed),
                "--max-model-len", str(o.max_model_len), "--max-num-seqs", str(max(1, self.settings.slots))]
        if o.eager:
            argv.append("--enforce-eager")
        if o.gpu_memory is not None:
            argv += ["--gpu-memory-utilization", str(o.gpu_memory)]
        spec = self.speculative_config()
        if spec:
            argv += ["--speculative-config", json.dumps(spec, sort_keys=True)]
        return argv + shlex.split(o.args)

    def server_env(self) -> dict[str, str]:
        return {"VLLM_CPU_KVCACHE_SPACE": str(self.opts.kv_cache_gib)}

    def params(self) -> dict:
        out = super().params()
        if not self.settings.url:
            out["speculative_config"] = self.speculative_config() or {}
        return out

    def served(self) -> str:
        if self.opts.served_model:
            return self.opts.served_model
        if self._model_name is None:
            listing = request_json(self.url + "/v1/models", None, self.settings.timeout)
            data = listing.get("data") if isinstance(listing, dict) else None
            if not isinstance(data, list) or not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise EngineError(f"{self.url}/v1/models lists no model")
            self._model_name = str(data[0]["id"])
        return self._model_name

    def request(self, prompt_ids: list[int], max_new_tokens: int) -> Reply:
        body = {"model": self.served(), "prompt": prompt_ids, "max_tokens": max_new_tokens, "temperature": 0,
                "top_k": 1, "stream": False, "return_token_ids": True, "logprobs": 0,
                "return_tokens_as_token_ids": True, "skip_special_tokens": False}
        try:
            reply = request_json(self.url + "/v1/completions", body, self.settings.timeout,
                                 reply_cap(len(prompt_ids) + max_new_tokens))
        except EngineError as e:  # a server that died meanwhile: its last log lines say why
            raise EngineError(f"{e}{self.died_note()}") from None
        choice = (reply.get("choices") or [None])[0] if isinstance(reply, dict) else None
        if not isinstance(choice, dict):
            raise EngineError(f"{self.name}: the reply has no choices (got {str(reply)[:120]})")
        tokens = token_ids(choice)
        usage = reply.get("usage")
        used = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(used, int) and not isinstance(used, bool) and isinstance(tokens, list) and used != len(tokens):
            raise EngineError(f"{self.name}: {len(tokens)} token ids returned but {used} counted (usage)")
        return Reply(tokens)


def token_ids(choice: dict) -> Any:
    """The generated ids of an OpenAI completion choice: `token_ids` (vLLM's return_token_ids), else
    the logprobs' tokens written as `token_id:N`; EngineError when neither is there."""
    if isinstance(choice.get("token_ids"), list):
        return choice["token_ids"]
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if isinstance(tokens, list) and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        try:
            return [int(t.split(":", 1)[1]) for t in tokens]
        except ValueError:
            pass
    raise EngineError("the completion carries no token ids (vLLM: return_token_ids; others: logprobs with "
                      "return_tokens_as_token_ids)")


class VllmAR(VllmMethod):
    name = "vllm:ar"
    summary = "vLLM without speculative_config: the baseline of the vllm:* methods"
    structure = Structure.NONE


class VllmNgram(VllmMethod):
    name = "vllm:ngram"
    summary = "vLLM's n-gram prompt lookup (speculative_config method ngram)"
    spec_method = "ngram"
    Options = LookupOptions

    def speculative_config(self) -> Optional[dict]:
        return {"method": "ngram", "num_speculative_tokens": self.ctx.budget - 1,
                "prompt_lookup_max": self.opts.lookup_max, "prompt_lookup_min": min(self.opts.lookup_min,
                                                                                  self.opts.lookup_max)}


class VllmSuffix(VllmMethod):
    name = "vllm:suffix"
    summary = "vLLM's suffix decoding (speculative_config method suffix; needs arctic-inference)"
    spec_method = "suffix"

    def speculative_config(self) -> Optional[dict]:
        return {"method": "suffix", "num_speculative_tokens": self.ctx.budget - 1}


class _WithModel(VllmMethod):
    Options = ModelOptions
    what: ClassVar[str] = "a draft model"

    def configure(self, settings: EngineSettings) -> None:
        super().configure(settings)
        if settings.url:
            return
        given = self.opts.draft or str(self.ctx.draft_model or "")
        if not given:
            raise UsageError(f"{self.name} needs {self.what}: -o {self.name}.draft=FOLDER (or --draft-model FOLDER)")
        local = Path(given).expanduser()
        if local.exists() and not (local / "config.json").is_file():
            raise UsageError(f"{self.name}: {given} is not a model folder (no config.json)")
        self.draft = str(local.resolve()) if local.exists() else given   # else a hub id, as vLLM reads it

    def speculative_config(self) -> Optional[dict]:
        return {"method": self.spec_method, "model": self.draft, "num_speculative_tokens": self.ctx.budget - 1}


class VllmEagle3(_WithModel):
    name = "vllm:eagle3"
    summary = "vLLM's EAGLE-3 heads (speculative_config method eagle3; -o vllm:eagle3.draft=FOLDER)"
    spec_method = "eagle3"
    what = "EAGLE-3 heads in vLLM's format"


class VllmDFlash(_WithModel):
    name = "vllm:dflash"
    summary = "vLLM's DFlash block drafter (speculative_config method dflash; -o vllm:dflash.draft=FOLDER)"
    spec_method = "dflash"
    what = "a DFlash drafter in z-lab's format (DFlashDraftModel)"


class VllmDraftModel(_WithModel):
    name = "vllm:draft_model"
    summary = "vLLM with a draft model (speculative_config method draft_model; --draft-model FOLDER)"
    spec_method = "draft_model"
