"""An engine method (`ENGINE:METHOD`): the engine decodes a whole answer with its own speculation
in one request; specbench sends the same prompt token ids it gives every method, the same
`--max-new-tokens`, cuts the output at EOS exactly as its own loop does, and turns what the
engine reports into a row.

Not a drafter in specbench's loop: the runner sees `decodes_itself` and calls `generate`; the
decoding loop knows no method by name. One module per engine (engines/llama_cpp.py,
engines/vllm.py) declares its methods; engines/methods.py lists them.

How an engine row's per-step fields are derived (docs/engines.md): the engine reports, per
request, the difference of its counters around it (`/metrics`: drafts D, draft tokens T,
accepted tokens A, accepted tokens per draft position P[k] = drafts whose position k+1 was
accepted). The first token comes from the prompt's forward, as in specbench's loop; of the other
G - 1 generated tokens, D + A came from the D verification steps that had a draft and the rest
from steps without one (1 token each). So `steps` = D + (G - 1 - D - A) and `accept_lengths` holds
1 + a_i for each draft (a_i from P: P[j-1] - P[j] drafts accepted exactly j) and 1 for each other
step: #MAT, the accept-length histogram and the vLLM counters are exact. The split of T over the
drafts is not reported: each draft gets at least its accepted tokens and the rejected rest is
spread one by one over the drafts that accepted least, so p_k of engine rows is approximate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from specbench_cli.engine.drafter import Structure
from specbench_cli.engines.server import EngineError, Server, parse_metrics, request_text
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method


@dataclass
class EngineSettings:
    """What an engine method needs from the run (run/plan.py fills it from the run's options)."""

    model: str = ""                    # --model
    engine_bin: Optional[str] = None   # --engine-bin
    url: Optional[str] = None          # --engine-url for this method (None: specbench starts a server)
    timeout: float = 300.0             # --engine-timeout: one request, or a server's start
    threads: int = 1                   # --threads: the server's -t
    dtype: str = "float32"             # --dtype: the weights' type where the engine converts (vLLM)
    seed: int = 0                      # --seed
    vocab_size: Optional[int] = None   # ids at or above it are garbage


@dataclass
class Counters:
    """One request's speculation counters (vLLM's names; llama.cpp exports the same ones)."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)


@dataclass
class Reply:
    """What one engine request returned."""

    tokens: list[int]
    prompt_time: float = 0.0          # the engine's own prompt processing, seconds (0: not reported)
    timings: dict = field(default_factory=dict)


def counter_deltas(before: dict[str, float], after: dict[str, float], prefix: str) -> Counters:
    """`prefix:spec_decode_*` counters of `after` minus `before` (every label set of a name
    summed; the per-position series by their `position` label)."""
    def total(name: str, metrics: dict[str, float]) -> float:
        return sum(v for k, v in metrics.items() if k.split("{", 1)[0] == f"{prefix}:{name}")

    def per_pos(metrics: dict[str, float]) -> dict[int, float]:
        out: dict[int, float] = {}
        for k, v in metrics.items():
            if k.split("{", 1)[0] == f"{prefix}:spec_decode_num_accepted_tokens_per_pos_total" and 'position="' in k:
                pos = int(k.split('position="', 1)[1].split('"', 1)[0])
                out[pos] = out.get(pos, 0.0) + v
        return out

    d = {n: int(round(total(n, after) - total(n, before))) for n in
         ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total")}
    pa, pb = per_pos(after), per_pos(before)
    top = max(pa, default=-1)
    positions = [int(round(pa.get(k, 0.0) - pb.get(k, 0.0))) for k in range(top + 1)]
    while positions and positions[-1] == 0:
        positions.pop()
    return Counters(d["spec_decode_num_drafts_total"], d["spec_decode_num_draft_tokens_total"],
                    d["spec_decode_num_accepted_tokens_total"], positions)


def steps_from_counters(generated: int, c: Counters) -> tuple[list[int], list[int], list[int]]:
    """(accept_lengths, draft_sizes, draft_path_lengths) of one answer of `generated` tokens from
    its counters (module doc). Drafted steps first, then the steps without a draft (the engine
    does not say in which order they came)."""
    drafts = max(0, c.drafts)
    accepted_each: list[int] = []
    if drafts:
        exact = [drafts - (c.per_pos[0] if c.per_pos else 0)]
        exact += [c.per_pos[j - 1] - (c.per_pos[j] if j < len(c.per_pos) else 0) for j in range(1, len(c.per_pos) + 1)]
        if c.per_pos and min(exact) >= 0 and sum(exact) == drafts and sum(j * n for j, n in enumerate(exact)) == c.accepted:
            accepted_each = [j for j, n in enumerate(exact) for _ in range(n)]
        else:  # no (or inconsistent) per-position counts: the accepted tokens spread evenly
            q, r = divmod(max(0, c.accepted), drafts)
            accepted_each = [q + (1 if i < r else 0) for i in range(drafts)]
        accepted_each.sort(reverse=True)
        # an engine that verifies past the cap (vLLM drafts whole blocks at the last step) counts
        # acceptances of tokens it then drops: the answer's tokens bound what its steps added
        excess = drafts + sum(accepted_each) - max(0, generated - 1)
        for i in range(len(accepted_each)):
            if excess <= 0:
                break
            cut = min(excess, accepted_each[i])
            accepted_each[i] -= cut
            excess -= cut
        accepted_each.sort(reverse=True)
    sizes = list(accepted_each)
    rejected = max(0, c.draft_tokens - sum(accepted_each))
    i = 0
    while rejected > 0 and sizes:  # one rejected token at a time, to the drafts that accepted least
        sizes[len(sizes) - 1 - (i % len(sizes))] += 1
        rejected -= 1
        i += 1
    plain = max(0, generated - 1 - drafts - sum(accepted_each))
    accept_lengths = [1 + a for a in accepted_each] + [1] * plain
    paths = [min(d, a + 1) for a, d in zip(accepted_each, sizes)] + [0] * plain
    return accept_lengths, sizes + [0] * plain, paths


class EngineMethod(Method):
    """Base of the engine methods: subclasses set `engine`, `metrics_prefix`, `summary` and
    implement `request(prompt_ids, max_new_tokens) -> Reply` and, for engines specbench starts,
    `server_argv()` (and `server_env()`): `ensure_ready` starts that server, `close` stops it."""

    engine: ClassVar[str] = ""
    metrics_prefix: ClassVar[str] = ""
    decodes_itself: ClassVar[bool] = True   # the runner calls `generate` instead of the decoding loop
    structure = Structure.CHAIN

    settings: EngineSettings

    def configure(self, settings: EngineSettings) -> None:
        """Bind the run's engine settings and check them (UsageError, before any model loads)."""
        self.settings = settings

    def setup(self) -> None:
        """Bound to the run's target: token ids at or above its vocabulary are garbage."""
        vocab = getattr(self.ctx.target, "vocab_size", None)
        if vocab is None and self.ctx.tokenizer is not None:
            vocab = len(self.ctx.tokenizer)
        if getattr(self, "settings", None) is not None and vocab:
            self.settings.vocab_size = int(vocab)

    # -- the server: someone else's (--engine-url) or one specbench starts ---------------------
    server: Optional[Server] = None

    def server_argv(self) -> list[str]:
        """The command that starts this method's server (`--host/--port` are added)."""
        raise NotImplementedError(f"{self.name} runs on a server someone else starts (--engine-url)")

    def server_env(self) -> dict[str, str]:
        """Environment variables the server gets on top of specbench's."""
        return {}

    health: ClassVar[str] = "/health"

    @property
    def url(self) -> str:
        if self.settings.url:
            return self.settings.url
        if self.server is None:
            raise EngineError(f"{self.name}: its server is not running")
        return self.server.url

    def ensure_ready(self, run_dir: Optional[Path]) -> None:
        """Start this method's server once (none with --engine-url); a server that died is
        replaced (the row of the question it died on has its last log lines)."""
        if self.settings.url or (self.server is not None and self.server.alive()):
            return
        if self.server is not None:
            self.server.stop()
            self.server = None
        folder = Path(run_dir) / "engines" if run_dir else Path.cwd()
        self.server = Server(self.server_argv(), folder / f"{self.name.replace(':', '-')}.log", health=self.health,
                             timeout=self.settings.timeout, env=self.server_env()).start()

    def close(self) -> None:
        """Stop the server `ensure_ready` started (idempotent)."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def died_note(self) -> str:
        """The server's last log lines when it has exited (a request failed because it died), else ''."""
        return self.server.tail_note() if self.server is not None and self.server.exited(within=2.0) else ""

    def request(self, prompt_ids: list[int], max_new_tokens: int) -> Reply:
        raise NotImplementedError

    def draft_length(self) -> int:
        """Tokens of a full draft (estimates drafts where only totals are reported)."""
        return max(1, self.ctx.budget - 1)

    def metrics(self) -> Optional[dict[str, float]]:
        """The server's counters now, or None when it exports none."""
        try:
            return parse_metrics(request_text(self.url + "/metrics", min(30.0, self.settings.timeout)))
        except EngineError:
            return None

    def params(self) -> dict:
        return {**super().params(), "engine": self.engine,
                **({"engine_url": self.settings.url} if getattr(self, "settings", None) and self.settings.url else {})}

    # -- one answer ------------------------------------------------------------------------
    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_ids: set[int], run_dir: Optional[Path] = None):
        """One answer as a `Generation` (engine/loop.py): the engine's tokens cut at EOS and at
        the cap as the loop cuts, steps from the counters (module doc). EngineError when the
        server fails or answers something unusable."""
        from specbench_cli.engine.loop import Generation

        self.ensure_ready(run_dir)
        before = self.metrics()
        t0 = time.perf_counter()
        reply = self.request(list(prompt_ids), max_new_tokens)
        wall = time.perf_counter() - t0
        after = self.metrics() if before is not None else None
        self.check_tokens(reply.tokens, max_new_tokens)
        out = reply.tokens[:max_new_tokens]
        for i, tok in enumerate(out):
            if tok in eos_ids:
                out = out[: i + 1]
                break
        if before is not None and after is not None:
            counters, source = counter_deltas(before, after, self.metrics_prefix), "metrics"
        else:  # no /metrics: totals from the reply's timings, drafts estimated as full-length ones
            t = reply.timings
            drafted, accepted = int(t.get("draft_n", 0) or 0), int(t.get("draft_n_accepted", 0) or 0)
            drafts = -(-drafted // max(1, self.draft_length())) if drafted else 0
            counters, source = Counters(drafts, drafted, accepted), "timings"
        accept_lengths, sizes, paths = steps_from_counters(len(reply.tokens), counters)
        g = Generation(output_ids=out, prompt_tokens=len(prompt_ids), wall_time=wall, prefill_time=reply.prompt_time)
        g.accept_lengths, g.draft_sizes, g.draft_path_lengths = accept_lengths, sizes, paths
        g.budget_used = [1 + d for d in sizes]
        g.stats = {"engine": self.engine, "counters_from": source, "generated": len(reply.tokens),
                   "spec_decode_num_drafts": counters.drafts, "spec_decode_num_draft_tokens": counters.draft_tokens,
                   "spec_decode_num_accepted_tokens": counters.accepted,
                   "spec_decode_num_accepted_tokens_per_pos": counters.per_pos, **({"timings": reply.timings}
                                                                                    if reply.timings else {})}
        return g

    def check_tokens(self, tokens: Any, max_new_tokens: int) -> None:
        """EngineError for a reply that cannot be an answer: not a list of token ids, ids outside
        the vocabulary, more tokens than asked for, or none at all."""
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise EngineError(f"{self.name}: the reply's tokens are not a list of token ids")
        if not tokens and max_new_tokens > 0:
            raise EngineError(f"{self.name}: the reply has no tokens")
        if len(tokens) > max_new_tokens:
            raise EngineError(f"{self.name}: {len(tokens)} tokens for a cap of {max_new_tokens}")
        vocab = self.settings.vocab_size
        bad = [t for t in tokens if t < 0 or (vocab is not None and t >= vocab)]
        if bad:
            raise EngineError(f"{self.name}: token id {bad[0]} is outside the vocabulary ({vocab})")


def split_urls(values: list[str]) -> dict[str, str]:
    """--engine-url values -> {method or '': url} ('' : every engine method without its own)."""
    out: dict[str, str] = {}
    for v in values:
        method, sep, url = v.partition("=") if "=" in v.split("://", 1)[0] else ("", "", v)
        out[method.strip()] = url.strip().rstrip("/")
    return out


def no_url(name: str, engine: str) -> UsageError:
    return UsageError(f"{name} runs on a server someone else starts: give --engine-url {name}=URL (or --engine-url URL "
                      f"for every {engine} method); docs/engines.md")
