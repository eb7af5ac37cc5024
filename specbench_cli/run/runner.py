"""`specbench run`: questions x methods -> rows in a run folder.

(~370 lines: the run config, its checks, planning per method instance and the fairness rules
below are one unit; the run's orchestration is workflow.py, auto budgets bcauto*.py.)

Fairness rules this file enforces:
- AR is always run, on the same questions, prompts and token counting as every method;
- per question, AR runs first and the other methods follow in an order that rotates from
  question to question (so slow drift of the machine does not favour one method), all in
  one process with one model;
- each method is warmed up once before anything is timed;
- every method sees the same sampling seed for the same (question, turn, repeat).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from specbench_cli.run.auto import bcauto
from specbench_cli import methods as method_registry
from specbench_cli import tasks as task_registry
from specbench_cli.errors import UsageError
from specbench_cli.models.load import DEFAULT_MODEL, DTYPES, check_device
from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn
from specbench_cli.store.rows import SampleRow
from specbench_cli.store.runfolder import RunFolder, now_iso, row_key

DEFAULT_BUDGET = 10


@dataclass
class RunConfig:
    model: str = DEFAULT_MODEL
    methods: list[str] = field(default_factory=list)  # empty: every registered method that needs no training
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=lambda: ["mini"])
    questions: Optional[str] = None
    categories: Optional[list[str]] = None
    limit: Optional[int] = None
    question_ids: Optional[list[str]] = None
    block_complexity: int | str = DEFAULT_BUDGET  # or "auto" (specbench_cli/run/auto/bcauto.py)
    max_new_tokens: int = 128
    dtype: str = "float32"
    device: str = "cpu"
    threads: Optional[int] = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    repeats: int = 1
    warmup: bool = True
    draft_model: Optional[str] = None
    output_dir: str = "results"
    auto_candidates: Optional[list[int]] = None  # budgets `auto` tries (None: bcauto.DEFAULT_CANDIDATES)
    auto_questions: int = bcauto.DEFAULT_CALIBRATION_QUESTIONS  # calibration questions for `auto`
    auto_tokens: int = bcauto.CALIBRATION_TOKENS  # new tokens per calibration question
    forward: str = "auto"  # how the target computes a forward, the same for every method (engine/forward/modes.py)

    def validate(self) -> None:
        self.block_complexity = bcauto.parse_bc(self.block_complexity)
        if self.auto_candidates is not None:
            self.auto_candidates = bcauto.parse_candidates(self.auto_candidates)
        if self.auto_questions < 1:
            raise UsageError(f"--auto-questions must be at least 1 (got {self.auto_questions})")
        if self.auto_tokens < 1:
            raise UsageError(f"--auto-tokens must be at least 1 (got {self.auto_tokens})")
        if self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens must be at least 1 (got {self.max_new_tokens})")
        if self.dtype not in DTYPES:
            from specbench_cli.errors import unknown

            raise unknown("dtype", self.dtype, DTYPES)
        if not self.temperature >= 0 or not math.isfinite(self.temperature):  # NaN fails both ways
            raise UsageError(f"--temperature must be >= 0 and finite (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"--top-p must be in (0, 1] (got {self.top_p})")
        if self.repeats < 1:
            raise UsageError(f"--repeats must be at least 1 (got {self.repeats})")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be at least 1 (got {self.threads})")
        named = set(self.methods) | {bcauto.parse_spec(m)[0] for m in self.methods}
        for m in self.method_options:
            if m not in named:
                raise UsageError(f"options given for method '{m}', which is not in --methods")
        for t in self.tasks:
            task_registry.get(t)
        check_device(self.device)
        from specbench_cli.engine.forward.modes import check as check_forward

        check_forward(self.forward)
        plan_methods(self)


def method_context(cfg: RunConfig, model=None, tokenizer=None, budget: Optional[int] = None):
    """The settings every method is planned against (and the target once loaded); `budget`
    defaults to the run's block complexity (the default one when that is `auto`)."""
    from specbench_cli.engine.verify import SamplingConfig
    from specbench_cli.methods.base import MethodContext

    if budget is None:
        budget = cfg.block_complexity if isinstance(cfg.block_complexity, int) else DEFAULT_BUDGET
    return MethodContext(model=model, tokenizer=tokenizer, budget=budget, device=cfg.device,
                         dtype=cfg.dtype, sampling=SamplingConfig(cfg.temperature, cfg.top_p), seed=cfg.seed,
                         draft_model=cfg.draft_model, target=cfg.model)


def plan_methods(cfg: RunConfig) -> dict:
    """Every method instance of the run (`pld`, `pld@6`, `pld@auto`), planned (options parsed
    and checked against its BC and sampling) but not bound: no model is loaded, so bad options
    fail in well under a second. An `auto` instance is planned at the default budget here and
    must accept at least one candidate budget; calibration re-plans it at the chosen one."""
    planned = {}
    for spec in method_order(cfg.methods):
        budget = bcauto.instance_budget(spec, cfg.block_complexity)
        if budget == bcauto.AUTO:
            method_registry.get(bcauto.parse_spec(spec)[0])  # an unknown name says so, not "nothing fits"
            fits = bcauto.feasible_budgets(lambda b: plan_instance(cfg, spec, b), auto_candidates(cfg), spec)
            budget = DEFAULT_BUDGET if DEFAULT_BUDGET in fits else fits[-1]
        planned[spec] = plan_instance(cfg, spec, budget)
    return planned


def plan_instance(cfg: RunConfig, spec: str, budget: int):
    """One method instance planned at `budget`; options given for its name and for the instance
    (`-o pld.max_ngram=4`, `-o pld@auto.max_ngram=4`) apply, the instance's last."""
    base = bcauto.parse_spec(spec)[0]
    options = {**cfg.method_options.get(base, {}), **(cfg.method_options.get(spec, {}) if spec != base else {})}
    return method_registry.get(base)(method_context(cfg, budget=budget), **options)


def auto_candidates(cfg: RunConfig) -> list[int]:
    return list(cfg.auto_candidates or bcauto.DEFAULT_CANDIDATES)


def default_methods() -> list[str]:
    """Every registered method that needs no training and is lossless (lossy ones, e.g.
    fastcot, change the answer on purpose and run only when asked for)."""
    return [n for n in method_registry.names()
            if not method_registry.describe(n)["needs_training"] and method_registry.describe(n)["lossless"]]


def load_questions(cfg: RunConfig):
    qs = []
    for t in cfg.tasks:
        qs += task_registry.get(t).load(cfg.questions)
    qs = task_registry.select(qs, cfg.categories, cfg.limit, cfg.question_ids)
    if not qs:
        raise UsageError("no questions left after --categories/--limit/--question-ids")
    return qs


def method_order(names: list[str]) -> list[str]:
    """AR first (the baseline), then the rest in the given order, without duplicates."""
    for n in names:
        bcauto.parse_spec(n)  # NAME@BC must be well formed (and not ar@...)
    rest = [n for n in dict.fromkeys(names) if n != "ar"]
    return ["ar"] + rest


def sample_seed(seed: int, question_id: str, turn: int, repeat: int) -> int:
    h = hashlib.sha256(f"{seed}|{question_id}|{turn}|{repeat}".encode()).digest()
    return int.from_bytes(h[:8], "little") & 0x7FFFFFFFFFFFFFFF


@dataclass
class Live:
    """Running totals per method for the progress line."""

    tokens: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)

    def add(self, row: dict) -> None:
        m = row["method"]
        if row["status"] != "ok":
            return
        self.tokens[m] = self.tokens.get(m, 0) + row["new_tokens"]
        self.seconds[m] = self.seconds.get(m, 0.0) + row["wall_time"]
        self.accepted[m] = self.accepted.get(m, 0) + sum(row["accept_lengths"])
        self.steps[m] = self.steps.get(m, 0) + row["steps"]

    def line(self) -> str:
        parts = []
        for m in self.tokens:
            tps = self.tokens[m] / self.seconds[m] if self.seconds[m] else 0.0
            mat = self.accepted[m] / self.steps[m] if self.steps[m] else 0.0
            parts.append(f"{m} {tps:.1f} tok/s #MAT {mat:.2f}")
        return " | ".join(parts)


class Runner:
    def __init__(self, cfg: RunConfig, store: RunFolder, on_row: Callable[[dict, Live], None] | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.on_row = on_row or (lambda row, live: None)
        self.live = Live()

    # -- set-up -------------------------------------------------------------------------------
    def setup(self, lm, planned: Optional[dict] = None) -> None:
        """Bind the planned methods (`plan_methods`) to the loaded target."""
        import torch

        from specbench_cli.engine.loop import Decoder

        self.lm = lm
        self.sampling = method_context(self.cfg).sampling
        self.decoder = Decoder(lm.model, stop_token_ids(lm.tokenizer, lm.model), self.sampling)
        self.prompter = ChatPrompter(lm.tokenizer)
        planned = planned if planned is not None else plan_methods(self.cfg)
        self.methods = {}
        for name, m in planned.items():
            # a draft model loaded for a method inherits how the target was loaded (--trust-remote-code)
            m.ctx = dataclasses.replace(m.ctx, trust_remote_code=getattr(lm, "trust_remote_code", False))
            self.methods[name] = m.bind(lm.model, lm.tokenizer)
        self.torch = torch

    # -- one generation -----------------------------------------------------------------------
    def _generate(self, method, prompt_ids: list[int], seed: int, max_new: int):
        gen = self.torch.Generator().manual_seed(seed) if not self.sampling.greedy else None
        return self.decoder.generate(method, prompt_ids, max_new, method.ctx.budget, gen)

    def warmup(self, question) -> None:
        ids = self.prompter(user_turn(question.turns[0]))
        for m in self.methods.values():
            self._generate(m, ids, 0, min(16, self.cfg.max_new_tokens))

    def _row(self, name: str, method, q, turn: int, repeat: int, gen=None, error: str | None = None,
             prompt_tokens: int = 0) -> dict:
        """The SampleRow of one turn: measured from `gen`, or an error row."""
        row = SampleRow(
            method=name, method_label=bcauto.instance_label(name, method.label(), self.cfg.block_complexity), method_params=method.params(),
            lossless=method.lossless,
            extra_params=method.extra_params, structure=method.structure.value, task=q.task, category=q.category,
            subcategory=q.subcategory, question_id=q.id, turn=turn, repeat=repeat,
            scorer=q.scorer, reference=q.reference_for(turn),
            block_complexity=method.ctx.budget, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
            status="error" if gen is None else "ok", error=error, prompt_tokens=prompt_tokens)
        if gen is not None:
            row.prompt_tokens, row.new_tokens, row.steps = gen.prompt_tokens, len(gen.output_ids), gen.steps
            row.wall_time, row.prefill_time = gen.wall_time, gen.prefill_time
            row.accept_lengths, row.draft_sizes, row.budget_used = gen.accept_lengths, gen.draft_sizes, gen.budget_used
            row.step_draft_ms, row.step_verify_ms = gen.step_draft_ms, gen.step_verify_ms
            row.draft_time, row.verify_time, row.overhead_time = gen.draft_time, gen.verify_time, gen.overhead_time
            row.output_ids = gen.output_ids
            row.method_stats = gen.stats
            row.output_text = self.lm.tokenizer.decode(gen.output_ids, skip_special_tokens=True)
        row.timestamp = now_iso()
        return row.to_dict()

    def _run_question(self, name: str, q, repeat: int, done: dict[tuple, dict], ar_rows: dict[tuple, dict]) -> None:
        method = self.methods[name]
        messages: list[dict] = []
        failed = None
        for turn, text in enumerate(q.turns):
            messages.append({"role": "user", "content": text})
            key = (name, q.task, q.id, turn, repeat)
            if key in done:  # resumed: reuse the stored answer as conversation history
                row = done[key]
                failed = failed or (row["error"] if row["status"] != "ok" else None)
                messages.append({"role": "assistant", "content": row.get("output_text", "")})
                continue
            prompt_ids: list[int] = []
            if failed:
                row = self._row(name, method, q, turn, repeat, error=f"not run: an earlier turn failed ({failed})")
            else:
                try:
                    prompt_ids = self.prompter(messages)
                    gen = self._generate(method, prompt_ids, sample_seed(self.cfg.seed, q.id, turn, repeat),
                                         self.cfg.max_new_tokens)
                    row = self._row(name, method, q, turn, repeat, gen)
                except Exception as e:  # noqa: BLE001 - a failing sample is recorded, never hidden
                    failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    row = self._row(name, method, q, turn, repeat, error=failed, prompt_tokens=len(prompt_ids))
            if name == "ar":
                ar_rows[(q.task, q.id, turn, repeat)] = row
            else:
                ref = ar_rows.get((q.task, q.id, turn, repeat))
                if ref is not None and ref["status"] == "ok" and row["status"] == "ok":
                    row["ar_match"], row["first_mismatch"] = compare_ids(row["output_ids"], ref["output_ids"])
            self.store.append(row)
            self.live.add(row)
            self.on_row(row, self.live)
            messages.append({"role": "assistant", "content": row["output_text"]})

    # -- the whole run ------------------------------------------------------------------------
    def work(self, questions) -> list[tuple[str, Any, int]]:
        """(method, question, repeat) in run order: per question AR first, the others rotating."""
        others = [n for n in self.methods if n != "ar"]
        units = []
        for r in range(self.cfg.repeats):
            for i, q in enumerate(questions):
                k = (i + r) % len(others) if others else 0
                for name in ["ar"] + others[k:] + others[:k]:
                    units.append((name, q, r))
        return units

    def run(self, questions, progress: Callable[[int, int], None] | None = None) -> int:
        """Run every unit not yet in the store; return the number of error rows written."""
        done = {row_key(r): r for r in self.store.rows()}
        ar_rows = {(r.get("task"), str(r["question_id"]), r["turn"], r.get("repeat", 0)): r
                   for r in done.values() if r["method"] == "ar"}
        for r in done.values():
            self.live.add(r)
        units = self.work(questions)
        todo = [u for u in units if any((u[0], u[1].task, u[1].id, t, u[2]) not in done
                                        for t in range(len(u[1].turns)))]
        if todo and self.cfg.warmup:
            self.warmup(questions[0])
        total = len(units)
        finished = total - len(todo)
        if progress:
            progress(finished, total)
        for name, q, r in todo:
            self._run_question(name, q, r, done, ar_rows)
            finished += 1
            if progress:
                progress(finished, total)
        return sum(1 for r in self.store.rows() if r["status"] != "ok")


def compare_ids(out: list[int], ref: list[int]) -> tuple[bool, Optional[int]]:
    if out == ref:
        return True, None
    for i, (a, b) in enumerate(zip(out, ref)):
        if a != b:
            return False, i
    return False, min(len(out), len(ref))


def config_from_manifest(manifest: dict, where: str = "manifest") -> RunConfig:
    """The RunConfig a manifest records; a UsageError naming `where` and the key when `config`
    is not an object or a value does not have its field's type (checked from the annotations)."""
    config = manifest.get("config", {})
    if not isinstance(config, dict):
        raise UsageError(f"{where}: 'config' must be an object, got {type(config).__name__}")
    hints = typing.get_type_hints(RunConfig)
    values = {}
    for f in dataclasses.fields(RunConfig):
        if f.name in config:
            if not _fits(config[f.name], hints[f.name]):
                raise UsageError(f"{where}: 'config.{f.name}' must be {_type_name(hints[f.name])}, "
                                 f"got {type(config[f.name]).__name__} {str(config[f.name])[:40]!r}")
            values[f.name] = config[f.name]
    if "block_complexity" in values:  # int | str admits any string: only a number or 'auto' is one
        values["block_complexity"] = bcauto.parse_bc(values["block_complexity"], f"{where}: 'config.block_complexity'")
    return RunConfig(**values)


def _fits(value: Any, hint: Any) -> bool:
    """Does a JSON value fit a (simple) type annotation? bool is not an int here."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
