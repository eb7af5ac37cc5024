"""Engine methods: `ENGINE:METHOD` -> "module:Class" (an `servers.engine_method.EngineMethod` subclass),
one module per engine. Other packages add their own through the `specbench.engine_methods`
entry-point group (specbench_cli/registry.py). Nothing is imported until a name is used.

They are a registry of their own, not `specbench_cli.methods`: they are not drafters in
specbench's loop (the tests that run every registered drafter do not apply to them) and never
join the default method set."""

from __future__ import annotations

from typing import Any

from specbench_cli.registry import Registry

_LLAMA = "specbench_cli.servers.llama_cpp"
_VLLM = "specbench_cli.servers.vllm"
_OPENAI = "specbench_cli.servers.openai"
_REGISTRY = Registry("engine method", "specbench.engine_methods", "specbench_cli.servers.engine_method:EngineMethod", {
    "llama.cpp:ar": f"{_LLAMA}:LlamaCppAR",
    "llama.cpp:draft": f"{_LLAMA}:LlamaCppDraft",
    "llama.cpp:ngram-simple": f"{_LLAMA}:LlamaCppNgramSimple",
    "llama.cpp:ngram-map-k": f"{_LLAMA}:LlamaCppNgramMapK",
    "llama.cpp:ngram-map-k4v": f"{_LLAMA}:LlamaCppNgramMapK4V",
    "llama.cpp:ngram-mod": f"{_LLAMA}:LlamaCppNgramMod",
    "llama.cpp:ngram-cache": f"{_LLAMA}:LlamaCppNgramCache",
    "vllm:ar": f"{_VLLM}:VllmAR",
    "vllm:ngram": f"{_VLLM}:VllmNgram",
    "vllm:suffix": f"{_VLLM}:VllmSuffix",
    "vllm:eagle3": f"{_VLLM}:VllmEagle3",
    "vllm:dflash": f"{_VLLM}:VllmDFlash",
    "vllm:draft_model": f"{_VLLM}:VllmDraftModel",
    "openai:ar": f"{_OPENAI}:OpenAIAR",
    "openai:spec": f"{_OPENAI}:OpenAISpec",
})
REGISTRY = _REGISTRY.entries
names = _REGISTRY.names
get = _REGISTRY.get
register = _REGISTRY.register


def describe(name: str) -> dict[str, Any]:
    return _REGISTRY.describe(name, {"summary": ""})


def plan(cfg, inst, budget: int, options: dict, context):
    """The engine method instance `inst` (a `config.instance.MethodInstance`) planned against run
    `cfg` (its options, the run's engine flags): UsageError (exit 2, before any model loads) for an
    unknown name, sampling, batches, a missing llama.cpp build or a missing --engine-url."""
    from specbench_cli.errors import UsageError
    from specbench_cli.servers.engine_method import EngineSettings, split_urls

    cls = get(inst.name)  # unknown: one line naming the known ones
    if cfg.decoding.temperature > 0:
        raise UsageError(f"{inst.label}: engine methods run greedy only (--temperature 0)")
    if cfg.decoding.batch_size > 1:
        raise UsageError(f"{inst.label}: engine methods decode one question at a time (--batch-size 1)")
    method = cls(context, **options)
    urls = split_urls(cfg.engines.url)
    threads = cfg.model.threads
    if threads is None:
        from specbench_cli.models.prompting import default_threads

        threads = default_threads()
    method.configure(EngineSettings(model=cfg.model.name, engine_bin=cfg.engines.bin,
                                    url=urls.get(inst.label, urls.get(inst.name, urls.get(""))),
                                    timeout=cfg.engines.timeout, threads=threads, dtype=cfg.model.dtype,
                                    seed=cfg.decoding.seed))
    return method
