"""llama.cpp's own speculation as methods: `llama.cpp:ar` (speculation off), `llama.cpp:draft`
(a draft GGUF), `llama.cpp:ngram-simple`, `-map-k`, `-map-k4v`, `-mod`, `-cache`.

Its speculation is fixed when `llama-server` starts, so each method (each configuration) gets a
server of its own, started at the run's warm-up on the run's GGUF and kept for the run (the
servers wait idle while another method decodes), stopped when the run ends: servers/server.py.
Drafts are at most BC - 1 tokens (`--spec-draft-n-max` / the n-gram modes' draft length), so the
run's block complexity means what it means for specbench's own methods. The n-gram sizes default
small, so 128-token answers draft something (llama.cpp's defaults never draft there).

Each question is one `POST /completion` with the prompt's token ids, `n_predict` = the cap,
greedy (`temperature` 0, `top_k` 1), no prompt cache, `return_tokens`; the reply's `tokens`
(EOS included, as llama.cpp stops after it), its `timings` and the `/metrics` counters before
and after it make the row (servers/engine_method.py): draft and accepted tokens from `timings` (exact;
/metrics prints them rounded to 6 significant digits), drafts and per-position counts from
/metrics (their rounding, past 10^6, allowed for). With `--engine-url llama.cpp:NAME=URL` an
llama-server someone else started is used instead, its configuration as given there.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import ClassVar, Optional

from specbench_cli.decoding.drafter import Structure
from specbench_cli.errors import UsageError
from specbench_cli.options import opt
from specbench_cli.servers.engine_method import EngineMethod, EngineSettings, Reply, checked_timings
from specbench_cli.servers.server import EngineError, reply_cap, request_json


@dataclass
class ServerOptions:
    ctx: int = opt(8192, lo=0, hi=1 << 22)          # -c: context of each of the server's slots (0: the model's)
    ngl: Optional[int] = opt(None, lo=-1, hi=10000)  # -ngl: layers on a GPU (llama.cpp's default when unset)
    args: str = opt("", from_folder=False)           # more llama-server arguments, as a shell would split them
                                                     # (never from a run folder: --resume takes them from -o)


@dataclass
class DraftOptions(ServerOptions):
    draft: str = ""                                  # the draft GGUF (default: --draft-model, else the run's GGUF)
    n_max: Optional[int] = opt(None, lo=1, hi=1024)  # draft length (default BC - 1)


@dataclass
class NgramOptions(ServerOptions):
    size_n: int = opt(3, lo=1, hi=1024)              # lookup n-gram length
    size_m: Optional[int] = opt(None, lo=1, hi=1024)  # draft m-gram length (default BC - 1)
    min_hits: int = opt(1, lo=1, hi=1024)


@dataclass
class NgramModOptions(ServerOptions):
    n_match: int = opt(4, lo=1, hi=1024)             # lookup length
    n_min: int = opt(1, lo=0, hi=1024)               # drafts shorter than this are dropped
    n_max: Optional[int] = opt(None, lo=1, hi=1024)  # draft length (default BC - 1)


class LlamaCppMethod(EngineMethod):
    engine = "llama.cpp"
    metrics_prefix = "llamacpp"
    spec_type: ClassVar[str] = ""
    Options = ServerOptions

    gguf: Optional[str] = None
    binary: Optional[str] = None

    def plan(self) -> None:
        if self.ctx.budget < 2 and self.spec_type:
            raise UsageError(f"{self.name} drafts BC - 1 tokens: give a block complexity of at least 2 (got "
                             f"{self.ctx.budget})")

    def configure(self, settings: EngineSettings) -> None:
        from specbench_cli.locate import require_llama_cpp

        super().configure(settings)
        if settings.url:
            return
        self.binary = str(require_llama_cpp(settings.engine_bin).server)   # missing: one line, exit 2
        self.gguf = gguf_of(settings.model, self.name)

    def spec_args(self) -> list[str]:
        """llama-server's speculation arguments for this method."""
        return []

    def draft_length(self) -> int:
        return self.ctx.budget - 1

    def server_argv(self) -> list[str]:
        o = self.opts
        slots, ctx = max(1, self.settings.slots), o.ctx
        if self.settings.slot_ctx and (not ctx or self.settings.slot_ctx < ctx):
            ctx = self.settings.slot_ctx
        # each of the -np slots gets -c / np tokens of context (llama.cpp's cache is not unified by default)
        argv = [str(self.binary), "-m", str(self.gguf), "-t", str(self.settings.threads), "-c", str(ctx * slots),
                "-np", str(slots), "--metrics", "--no-warmup"]
        if o.ngl is not None:
            argv += ["-ngl", str(o.ngl)]
        return argv + self.spec_args() + shlex.split(o.args)

    def request(self, prompt_ids: list[int], max_new_tokens: int) -> Reply:
        body = {"prompt": prompt_ids, "n_predict": max_new_tokens, "temperature": 0, "top_k": 1,
                "cache_prompt": False, "return_tokens": True, "stream": False}
        try:  # the reply is capped by what the prompt and the answer's tokens can take
            reply = request_json(self.url + "/completion", body, self.settings.timeout,
                                 reply_cap(len(prompt_ids) + max_new_tokens))
        except EngineError as e:  # a server that died meanwhile: its last log lines say why
            raise EngineError(f"{e}{self.died_note()}") from None
        if not isinstance(reply, dict) or "tokens" not in reply:
            raise EngineError(f"{self.name}: the reply has no 'tokens' (got {str(reply)[:120]})")
        timings = reply.get("timings") if isinstance(reply.get("timings"), dict) else {}
        try:  # counts whole and >= 0, times finite and >= 0, before any of them is used
            kept = checked_timings({k: timings[k] for k in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
                                                            "draft_n", "draft_n_accepted") if k in timings})
        except EngineError as e:
            raise EngineError(f"{self.name}: {e}") from None
        tokens = reply["tokens"]
        if "predicted_n" in kept and isinstance(tokens, list) and kept["predicted_n"] != len(tokens):
            raise EngineError(f"{self.name}: {len(tokens)} tokens returned but {kept['predicted_n']} counted "
                              f"(timings.predicted_n)")
        return Reply(tokens, float(kept.get("prompt_ms", 0.0)) / 1000, kept)

    def exact_totals(self, reply: Reply) -> Optional[tuple[int, int]]:
        """The reply's own `timings.draft_n` and `draft_n_accepted` (this request's, exact):
        llama-server prints its /metrics counters with 6 significant digits (`1.23457e+06`), so
        past a million draft tokens their difference around one request is off by up to tens.
        /metrics still gives the drafts and the per-position counts, which timings lack."""
        t = reply.timings
        return (t["draft_n"], t["draft_n_accepted"]) if "draft_n" in t and "draft_n_accepted" in t else None

    def params(self) -> dict:
        return {**super().params(), "spec_type": self.spec_type or "none", "server_args": self.spec_args()}


class LlamaCppAR(LlamaCppMethod):
    name = "llama.cpp:ar"
    summary = "llama.cpp's llama-server, speculation off: the baseline of the llama.cpp:* methods"
    structure = Structure.NONE


class LlamaCppDraft(LlamaCppMethod):
    name = "llama.cpp:draft"
    summary = "llama.cpp's draft-model speculation (draft-simple; draft GGUF: -o llama.cpp:draft.draft=FILE)"
    spec_type = "draft-simple"
    Options = DraftOptions

    def configure(self, settings: EngineSettings) -> None:
        super().configure(settings)
        if not settings.url:
            given = self.opts.draft or (self.ctx.draft_model if str(self.ctx.draft_model or "").endswith(".gguf")
                                        else "")
            self.draft_gguf = gguf_of(given, self.name) if given else self.gguf

    def draft_length(self) -> int:
        return self.opts.n_max or self.ctx.budget - 1

    def spec_args(self) -> list[str]:
        return ["-md", str(getattr(self, "draft_gguf", "") or self.gguf), "--spec-type", self.spec_type,
                "--spec-draft-n-max", str(self.draft_length())]


class _NgramMap(LlamaCppMethod):
    Options = NgramOptions
    flag: ClassVar[str] = ""   # ngram-simple / ngram-map-k / ngram-map-k4v

    def draft_length(self) -> int:
        return self.opts.size_m or self.ctx.budget - 1

    def spec_args(self) -> list[str]:
        f = f"--spec-{self.spec_type}"
        return ["--spec-type", self.spec_type, f"{f}-size-n", str(self.opts.size_n), f"{f}-size-m",
                str(self.draft_length()), f"{f}-min-hits", str(self.opts.min_hits)]


class LlamaCppNgramSimple(_NgramMap):
    name = "llama.cpp:ngram-simple"
    summary = "llama.cpp's ngram-simple: drafts the m tokens that followed the last match of the n-gram"
    spec_type = "ngram-simple"


class LlamaCppNgramMapK(_NgramMap):
    name = "llama.cpp:ngram-map-k"
    summary = "llama.cpp's ngram-map-k: an n-gram -> m-gram map of the context"
    spec_type = "ngram-map-k"


class LlamaCppNgramMapK4V(_NgramMap):
    name = "llama.cpp:ngram-map-k4v"
    summary = "llama.cpp's ngram-map-k4v: the n-gram map keeping four values per key"
    spec_type = "ngram-map-k4v"


class LlamaCppNgramMod(LlamaCppMethod):
    name = "llama.cpp:ngram-mod"
    summary = "llama.cpp's ngram-mod: a hashed n-gram table shared by the server's requests"
    spec_type = "ngram-mod"
    Options = NgramModOptions

    def draft_length(self) -> int:
        return self.opts.n_max or self.ctx.budget - 1

    def spec_args(self) -> list[str]:
        return ["--spec-type", self.spec_type, "--spec-ngram-mod-n-match", str(self.opts.n_match),
                "--spec-ngram-mod-n-min", str(min(self.opts.n_min, self.draft_length())),
                "--spec-ngram-mod-n-max", str(self.draft_length())]


class LlamaCppNgramCache(LlamaCppMethod):
    name = "llama.cpp:ngram-cache"
    summary = "llama.cpp's ngram-cache (lookup decoding; its draft length is fixed at 8 in this build)"
    spec_type = "ngram-cache"

    def draft_length(self) -> int:
        return 8

    def spec_args(self) -> list[str]:
        return ["--spec-type", self.spec_type]


def gguf_of(model: str, method: str) -> str:
    """The GGUF file a model reference names (a .gguf path or an alias of one), or UsageError."""
    from specbench_cli.models.load import resolve

    kind, location = resolve(model)
    if kind != "gguf":
        raise UsageError(f"{method} runs llama-server, which reads GGUF files: give --model FILE.gguf (or an alias of "
                         f"one), not {model}")
    return location
