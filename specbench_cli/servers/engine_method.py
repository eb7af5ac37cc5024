"""An engine method (`ENGINE:METHOD`): the engine decodes a whole answer with its own speculation
in one request; specbench sends the same prompt token ids it gives every method, the same
`--max-new-tokens`, cuts the output at EOS exactly as its own loop does, and turns what the
engine reports into a row.

Not a drafter in specbench's loop: the runner sees `decodes_itself` and calls `generate`; the
decoding loop knows no method by name. One module per engine (servers/llama_cpp.py,
servers/vllm.py) declares its methods; servers/registry.py lists them.

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

Nothing an engine reports is trusted as it comes: every count (`/metrics` series, `timings`) must
be a finite, non-negative whole number, every time finite, non-negative and within the request's
own round trip, and the counters must be ones the request could have produced (at most one draft
per generated token, at most the longest draft's tokens a draft, accepted <= drafted, positions
below the longest draft), checked before anything is sized by them; otherwise the question's row
is an error row saying which value is wrong (EngineError). A counter /metrics printed rounded
(llama-server's 6 significant digits) is checked to within its rounding (Counters.slack), and an
engine whose replies count draft and accepted tokens exactly (llama.cpp's `timings`) has those
taken from the reply (EngineMethod.exact_totals).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from specbench_cli.decoding.drafter import Structure
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method
from specbench_cli.servers.server import EngineError, ReplyTooLarge, Server, parse_metrics, request_text


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
    slots: int = 1                     # requests the server decodes at once (llama-server -np, vLLM
                                       # --max-num-seqs): 1 for a run, the highest concurrency for a load run
    slot_ctx: Optional[int] = None     # a load run's tokens per slot (longest prompt + cap + BC): caps
                                       # llama-server's per-slot context below its `ctx` option


@dataclass
class Counters:
    """One request's speculation counters (vLLM's names; llama.cpp exports the same ones).

    `slack`: how far each count ('drafts', 'draft_tokens', 'accepted', 'per_pos' a list by
    position) may be from the server's own, where /metrics printed a counter rounded (llama.cpp's
    6 significant digits, `1.23457e+06`: server.printed_bound): the rounding bounds of the two
    values a difference came from, summed; none where both were printed in full (exact).
    `totals_from`: 'timings' where draft_tokens and accepted are the reply's own exact counts."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    slack: dict[str, Any] = field(default_factory=dict, compare=False)
    totals_from: str = field(default="", compare=False)


@dataclass
class Reply:
    """What one engine request returned."""

    tokens: list[int]
    prompt_time: float = 0.0          # the engine's own prompt processing, seconds (0: not reported)
    timings: dict = field(default_factory=dict)


# The longest draft any engine method's options allow (their `hi`): the bound on draft lengths
# and positions where the server's own configuration is not known (--engine-url, extra `args`).
DRAFT_LIMIT = 1024
# Counts past 2^53 are not whole numbers as floats (Prometheus writes floats): no request makes them.
COUNT_LIMIT = 1 << 53
_POSITION = re.compile(r"[0-9]{1,9}")
LOG_FOLDER = "engines"  # RUN/engines/METHOD.log: each server's output (opened without following links: server.py)


def _shown(value: Any) -> str:
    """An engine's value as an error shows it: 1e+15, nan, -5000, 'soon' (a long one cut)."""
    return f"{value:g}" if isinstance(value, float) else str(value) if isinstance(value, int) else repr(value)[:40]


def engine_count(value: Any, what: str) -> int:
    """A count an engine reported (`what` names it): a finite, non-negative whole number up to
    COUNT_LIMIT, as an int; else EngineError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())) or value < 0:
        raise EngineError(f"{what[:200]} is {_shown(value)}, not a count (a whole number >= 0)")
    if value > COUNT_LIMIT:
        raise EngineError(f"{what[:200]} is {_shown(value)}, past any count a request makes")
    return int(value)


def engine_ms(value: Any, what: str) -> float:
    """A time in milliseconds an engine reported: a finite number >= 0; else EngineError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)) or value < 0:
        raise EngineError(f"{what[:200]} is {_shown(value)}, not a time (a finite number of ms >= 0)")
    return float(value)


def checked_timings(timings: dict) -> dict:
    """An engine's `timings` with each value checked: `*_ms` a time (engine_ms), the others
    counts (engine_count); EngineError naming the first that is neither."""
    return {k: engine_ms(v, f"timings.{k}") if k.endswith("_ms") else engine_count(v, f"timings.{k}")
            for k, v in timings.items()}


def counter_deltas(before: dict[str, float], after: dict[str, float], prefix: str,
                   max_draft: int = DRAFT_LIMIT) -> Counters:
    """`prefix:spec_decode_*` counters of `after` minus `before` (every label set of a name
    summed; the per-position series by their `position` label), with the slack their printed
    rounding leaves (Counters; `bounds` of server.Metrics, none for a plain dict). EngineError for
    a value that is not a count, a counter that went down by more than its rounding (by no more:
    0), a position label that is not a number, or a position at or past `max_draft` that counted
    anything during the request beyond its rounding (a server may list positions up to a longer
    draft it never makes; none sizes a list before this check)."""
    bounds = {**getattr(before, "bounds", {}), **{f"after {k}": v for k, v in getattr(after, "bounds", {}).items()}}

    def total(name: str, metrics: dict[str, float], tag: str) -> tuple[int, int]:
        keys = [k for k in metrics if k.split("{", 1)[0] == f"{prefix}:{name}"]
        return (sum(engine_count(metrics[k], f"/metrics {k}") for k in keys),
                sum(bounds.get(f"{tag}{k}", 0) for k in keys))

    def per_pos(metrics: dict[str, float], tag: str) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for k, v in metrics.items():
            if k.split("{", 1)[0] == f"{prefix}:spec_decode_num_accepted_tokens_per_pos_total" and 'position="' in k:
                label = k.split('position="', 1)[1].split('"', 1)[0]
                if not _POSITION.fullmatch(label):
                    raise EngineError(f"/metrics {k[:200]}: position {label[:40]!r} is not a draft position")
                pos = int(label)
                n, bound = out.get(pos, (0, 0))
                out[pos] = (n + engine_count(v, f"/metrics {k}"), bound + bounds.get(f"{tag}{k}", 0))
        return out

    def delta(name: str, now: tuple[int, int], then: tuple[int, int]) -> tuple[int, int]:
        """(now - then, its slack); a fall within the two values' rounding is 0 (it may be none)."""
        slack = now[1] + then[1]
        if now[0] < then[0] - slack:
            raise EngineError(f"/metrics {prefix}:{name} went down during the request ({then[0]} -> {now[0]}): a "
                              f"server restarted or shared")
        return max(0, now[0] - then[0]), slack

    d = {n: delta(n, total(n, after, "after "), total(n, before, "")) for n in
         ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total")}
    pa, pb = per_pos(after, "after "), per_pos(before, "")
    name = "spec_decode_num_accepted_tokens_per_pos_total"
    counted = {k: delta(f'{name}{{position="{k}"}}', v, pb.get(k, (0, 0))) for k, v in pa.items()}
    beyond = sorted(k for k, (n, slack) in counted.items() if n > slack and k >= max_draft)
    if beyond:
        raise EngineError(f'/metrics {prefix}:{name}{{position="{beyond[0]}"}} counted {counted[beyond[0]][0]} '
                          f"acceptances, but position {beyond[0]} is not one of a draft of at most {max_draft} "
                          f"tokens (0 to {max_draft - 1})")
    top = max((k for k, (n, _) in counted.items() if n and k < max_draft), default=-1)
    positions = [counted.get(k, (0, 0)) for k in range(top + 1)]
    while positions and positions[-1][0] == 0:
        positions.pop()
    slack = {key: d[n][1] for key, n in (("drafts", "spec_decode_num_drafts_total"),
                                         ("draft_tokens", "spec_decode_num_draft_tokens_total"),
                                         ("accepted", "spec_decode_num_accepted_tokens_total")) if d[n][1]}
    if any(s for _, s in positions):
        slack["per_pos"] = [s for _, s in positions]
    return Counters(d["spec_decode_num_drafts_total"][0], d["spec_decode_num_draft_tokens_total"][0],
                    d["spec_decode_num_accepted_tokens_total"][0], [n for n, _ in positions], slack)


def _counted(n: int, slack: int) -> str:
    return f"{n} (+/- {slack}, as /metrics printed it)" if slack else str(n)


def check_counters(c: Counters, generated: int, max_draft: int) -> Counters:
    """`c` if it could come from one answer of `generated` tokens with drafts of at most
    `max_draft` tokens, else EngineError: a draft is verified by a step that adds at least one
    token (drafts <= generated), holds at most `max_draft` tokens (one more draft may be made and
    never verified, as the answer ends), accepts at most what it drafted, and a position is
    accepted at most once a draft. A count known only to within its `slack` (rounded /metrics)
    fails only when no value within it would pass, and is then brought to the nearest value that
    does (drafts to `generated`, accepted to the draft tokens, a position to the drafts); exact
    counts are checked exactly."""
    slack = c.slack
    s_drafts, s_tokens, s_accepted = slack.get("drafts", 0), slack.get("draft_tokens", 0), slack.get("accepted", 0)
    s_pos = list(slack.get("per_pos", [])) + [0] * (len(c.per_pos) - len(slack.get("per_pos", [])))
    if c.drafts - s_drafts > generated:
        raise EngineError(f"the server counted {_counted(c.drafts, s_drafts)} drafts for an answer of {generated} "
                          f"tokens (at most one draft per token)")
    most_drafts = min(c.drafts + s_drafts, generated)   # the most the server's own count can be
    if c.draft_tokens - s_tokens > (most_drafts + 1) * max_draft:
        raise EngineError(f"the server counted {_counted(c.draft_tokens, s_tokens)} draft tokens in "
                          f"{_counted(c.drafts, s_drafts)} drafts (at most {max_draft} a draft, and one more draft "
                          f"unverified)")
    if c.accepted - s_accepted > c.draft_tokens + s_tokens:
        raise EngineError(f"the server counted {_counted(c.accepted, s_accepted)} accepted tokens of "
                          f"{_counted(c.draft_tokens, s_tokens)} drafted")
    over = [(n, s) for n, s in zip(c.per_pos, s_pos) if n - s > most_drafts]
    if over:
        raise EngineError(f"the server counted {_counted(*max(over))} acceptances at one draft position in "
                          f"{_counted(c.drafts, s_drafts)} drafts")
    if not slack:
        return c
    accepted = min(c.accepted, c.draft_tokens)
    drafts = min(c.drafts, generated)
    if s_drafts:  # each drafted step adds 1 + its accepted tokens to the G - 1 after the prompt's
        drafts = min(drafts, max(generated - 1 - accepted, max(c.per_pos, default=0), 0))
    return Counters(drafts, c.draft_tokens, accepted, [min(n, drafts) for n in c.per_pos], c.slack, c.totals_from)


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
    if rejected and sizes:  # one rejected token at a time, to the drafts that accepted least (last first)
        q, r = divmod(rejected, len(sizes))
        sizes = [s + q + (1 if i >= len(sizes) - r else 0) for i, s in enumerate(sizes)]
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
        folder = Path(run_dir) / LOG_FOLDER if run_dir else Path.cwd()
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

    def max_draft(self) -> int:
        """The longest draft this method's server can make, which bounds what its counters may say:
        its configured draft length when specbench started it as configured; DRAFT_LIMIT when the
        server is someone else's (--engine-url) or has extra `args` (which may set another)."""
        if self.settings.url or getattr(getattr(self, "opts", None), "args", ""):
            return DRAFT_LIMIT
        return max(1, self.draft_length(), self.ctx.budget - 1)

    def metrics(self) -> Optional[dict[str, float]]:
        """The server's speculation counters now, or None when it exports none (or would not
        answer); EngineError for a /metrics past the reply cap."""
        try:
            text = request_text(self.url + "/metrics", min(30.0, self.settings.timeout))
        except ReplyTooLarge:
            raise
        except EngineError:
            return None
        return parse_metrics(text, f"{self.metrics_prefix}:spec_decode_")

    def params(self) -> dict:
        return {**super().params(), "engine": self.engine,
                **({"engine_url": self.settings.url} if getattr(self, "settings", None) and self.settings.url else {})}

    # -- one answer ------------------------------------------------------------------------
    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_ids: set[int], run_dir: Optional[Path] = None):
        """One answer as a `Generation` (decoding/decoder.py): the engine's tokens cut at EOS and at
        the cap as the loop cuts, steps from the counters (module doc). EngineError when the
        server fails or answers something unusable."""
        from specbench_cli.decoding.decoder import Generation

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
        try:
            counters, source = self.counters(before, after, reply, wall)
        except EngineError as e:
            raise EngineError(f"{self.name}: {e}") from None
        accept_lengths, sizes, paths = steps_from_counters(len(reply.tokens), counters)
        g = Generation(output_ids=out, prompt_tokens=len(prompt_ids), wall_time=wall, prefill_time=reply.prompt_time)
        g.accept_lengths, g.draft_sizes, g.draft_path_lengths = accept_lengths, sizes, paths
        g.budget_used = [1 + d for d in sizes]
        g.stats = {"engine": self.engine, "counters_from": source, "generated": len(reply.tokens),
                   **({"totals_from": counters.totals_from} if counters.totals_from else {}),
                   "spec_decode_num_drafts": counters.drafts, "spec_decode_num_draft_tokens": counters.draft_tokens,
                   "spec_decode_num_accepted_tokens": counters.accepted,
                   "spec_decode_num_accepted_tokens_per_pos": counters.per_pos, **({"timings": reply.timings}
                                                                                    if reply.timings else {})}
        return g

    def counters(self, before: Optional[dict[str, float]], after: Optional[dict[str, float]], reply: Reply,
                 wall: float) -> tuple[Counters, str]:
        """(the request's counters, where they came from: 'metrics' or 'timings'), each checked
        against what the reply's G tokens could have produced (module doc); EngineError otherwise.
        The reply's timings are checked too: a time longer than the request's round trip `wall`
        (1 s of slack) was not measured on it."""
        generated, longest = len(reply.tokens), self.max_draft()
        for key, value in checked_timings(reply.timings).items():
            if key.endswith("_ms") and value > (wall + 1.0) * 1000:
                raise EngineError(f"timings.{key} is {_shown(value)} ms, longer than the request took "
                                  f"({wall * 1000:.0f} ms)")
        if reply.prompt_time < 0 or not math.isfinite(reply.prompt_time) or reply.prompt_time > wall + 1.0:
            raise EngineError(f"the reply's prompt time {_shown(reply.prompt_time)} s is not a time within the "
                              f"request's {wall:.3f} s")
        if before is not None and after is None:
            raise EngineError(f"{self.url}/metrics answered before the request but not after it: the request's "
                              f"counters are unknown")
        if before is not None and after is not None:
            counters, source = counter_deltas(before, after, self.metrics_prefix, longest), "metrics"
            exact = self.exact_totals(reply)
            if exact is not None:  # /metrics as it came is checked (above all, a hostile one) before it is replaced
                counters = check_counters(counters, generated, longest)
                slack = {k: v for k, v in counters.slack.items() if k not in ("draft_tokens", "accepted")}
                counters = Counters(counters.drafts, exact[0], exact[1], counters.per_pos, slack, "timings")
        else:  # no /metrics: totals from the reply's timings, drafts estimated as full-length ones
            t = reply.timings
            drafted = engine_count(t.get("draft_n", 0) or 0, "timings.draft_n")
            accepted = engine_count(t.get("draft_n_accepted", 0) or 0, "timings.draft_n_accepted")
            if drafted > (generated + 1) * longest:
                raise EngineError(f"timings.draft_n is {drafted} for an answer of {generated} tokens (at most "
                                  f"({generated} + 1) x {longest}: a draft of at most {longest} tokens a token, "
                                  f"and one more)")
            drafts = min(generated, -(-drafted // max(1, self.draft_length()))) if drafted else 0
            counters, source = Counters(drafts, drafted, accepted), "timings"
        return check_counters(counters, generated, longest), source

    def exact_totals(self, reply: Reply) -> Optional[tuple[int, int]]:
        """(draft tokens, accepted tokens) of this request exactly as the reply counts them, to use
        instead of /metrics' (which may print them rounded), or None where the reply has none."""
        return None

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
