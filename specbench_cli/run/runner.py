"""`specbench run`: questions x methods -> rows in a run folder.

The run's options are config.py, planning run/plan.py, the orchestration (checks, lock,
manifest, progress) workflow.py, auto budgets run/auto/.

Fairness rules this file enforces:
- AR is always run, on the same questions, prompts and token counting as every method;
- per question, AR runs first and the other methods follow in an order that rotates from
  question to question (so slow drift of the machine does not favour one method), all in
  one process with one model;
- each method is warmed up once before anything is timed;
- every method sees the same sampling seed for the same (question, turn, repeat);
- a temperature sweep (`--temperature 0,0.7,1`) runs all of the above at each temperature in
  turn, AR included, the methods planned and bound again for each (their drafts follow the
  sampling), with the same seeds at every temperature; rows record their temperature and each
  method's rows are compared with AR's at the same temperature;
- a method that learns from its own earlier answers (suffix's global tree) starts every pass
  over the questions (each repeat) remembering nothing, so it never sees another pass's answer
  to the question it decodes, and is handed each of its finished turns in run order, on
  `--resume` too (the rows already written, where the run reaches them).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from specbench_cli.config import RunConfig, at_temperature, temperatures
from specbench_cli.engines.naming import compared_with, is_baseline
from specbench_cli.models.header import model_context_length
from specbench_cli.models.pieces import token_pieces
from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn
from specbench_cli.run import limits
from specbench_cli.run.auto import bcauto
from specbench_cli.run.plan import method_context, plan_methods
from specbench_cli.store.rows import PARTS, SampleRow, row_key
from specbench_cli.store.runfolder import RunFolder, now_iso


def sample_seed(seed: int, question_id: str, turn: int, repeat: int) -> int:
    h = hashlib.sha256(f"{seed}|{question_id}|{turn}|{repeat}".encode()).digest()
    return int.from_bytes(h[:8], "little") & 0x7FFFFFFFFFFFFFFF


@dataclass
class Live:
    """Running numbers per method for the progress line, on the basis of the tables: tok/s is
    the mean over questions of each question's tokens / seconds (all its turns), #MAT is pooled
    over steps. A question whose turn failed is left out, as in the tables."""

    questions: dict[str, dict[tuple, list[float]]] = field(default_factory=dict)  # method -> key -> [tok, s]
    failed: dict[str, set] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    sweep: bool = False  # several temperatures: one entry per method and temperature

    def add(self, row: dict) -> None:
        m = f"{row['method']} T={row.get('temperature', 0.0):g}" if self.sweep else row["method"]
        key = (row.get("task"), str(row["question_id"]), row.get("repeat", 0))
        per_question = self.questions.setdefault(m, {})
        if row["status"] != "ok":
            self.failed.setdefault(m, set()).add(key)
            return
        tokens_seconds = per_question.setdefault(key, [0.0, 0.0])
        tokens_seconds[0] += row["new_tokens"]
        tokens_seconds[1] += row["wall_time"]
        self.accepted[m] = self.accepted.get(m, 0) + sum(row["accept_lengths"])
        self.steps[m] = self.steps.get(m, 0) + row["steps"]

    def tokens_per_s(self, method: str) -> float:
        failed = self.failed.get(method, set())
        rates = [tok / s for key, (tok, s) in self.questions.get(method, {}).items() if s > 0 and key not in failed]
        return sum(rates) / len(rates) if rates else 0.0

    def line(self) -> str:
        parts = []
        for m in self.questions:
            mat = self.accepted.get(m, 0) / self.steps[m] if self.steps.get(m) else 0.0
            parts.append(f"{m} {self.tokens_per_s(m):.1f} tok/s #MAT {mat:.2f}")
        return " | ".join(parts)


def check_temperatures(cfg: RunConfig) -> dict:
    """`check_config` (run/plan.py) at every temperature of the run, before any model loads (a
    method that cannot sample is refused at the temperature it cannot take); returns the
    instances planned at the first temperature, the ones the run binds first."""
    from specbench_cli.run.plan import check_config

    if not isinstance(cfg.temperature, list):
        return check_config(cfg)
    cfg.validate()
    plans = [check_config(at_temperature(cfg, t)) for t in temperatures(cfg)]
    return plans[0]


class Runner:
    def __init__(self, cfg: RunConfig, store: RunFolder, on_row: Callable[[dict, Live], None] | None = None) -> None:
        self.sweep_cfg, self.temperatures = cfg, temperatures(cfg)
        self.cfg = at_temperature(cfg, self.temperatures[0])  # the settings of the temperature being decoded
        self.store = store
        self.on_row = on_row or (lambda row, live: None)
        self.live = Live(sweep=len(self.temperatures) > 1)

    # -- set-up -------------------------------------------------------------------------------
    def setup(self, lm, planned: Optional[dict] = None) -> None:
        """Bind the planned methods (`plan_methods`) to the loaded target."""
        import torch

        from specbench_cli.engine.loop import Decoder

        self.lm = lm
        self.sampling = method_context(self.cfg).sampling
        # the step split: free on a CPU, on CUDA only when asked for (a sync per part; docs/metrics.md)
        self.decoder = Decoder(lm.target, stop_token_ids(lm.tokenizer, lm.target), self.sampling,
                               time_steps=bool(self.cfg.time_steps))
        self.prompter = ChatPrompter(lm.tokenizer, self.cfg.prompt_template)
        planned = planned if planned is not None else plan_methods(self.cfg)
        # every method of a question gets the same cap, so answers stay comparable with AR's
        self.room = limits.Room(model_context_length(lm.target), [m.ctx.budget for m in planned.values()])
        self.methods = {}
        for name, m in planned.items():
            # a draft model loaded for a method inherits how the target was loaded (--trust-remote-code)
            m.ctx = dataclasses.replace(m.ctx, trust_remote_code=getattr(lm, "trust_remote_code", False))
            self.methods[name] = m.bind(lm.target, lm.tokenizer)
        self.torch = torch

    # -- one generation -----------------------------------------------------------------------
    def _generate(self, method, prompt_ids: list[int], seed: int, max_new: int):
        if getattr(method, "decodes_itself", False):  # an engine's own speculation (engines/method.py)
            return method.generate(prompt_ids, max_new, self.decoder.eos_ids, getattr(self.store, "path", None))
        gen = self.torch.Generator().manual_seed(seed) if not self.sampling.greedy else None
        return self.decoder.generate(method, prompt_ids, max_new, method.ctx.budget, gen, method.ctx.adaptive)

    def warmup(self, question) -> None:
        ids = self.prompter(user_turn(question.turns[0]))
        for m in self.methods.values():
            self._generate(m, ids, 0, min(16, self.cfg.max_new_tokens))

    def _row(self, name: str, method, q, turn: int, repeat: int, gen=None, error: str | None = None,
             prompt_tokens: int = 0, max_new: Optional[int] = None, batch_id: Optional[int] = None) -> dict:
        """The SampleRow of one turn: measured from `gen`, or an error row."""
        row = SampleRow(
            batch_size=self.cfg.batch_size, batch_id=batch_id,
            method=name, method_label=bcauto.instance_label(name, method.label(), self.cfg.block_complexity), method_params=method.params(),
            lossless=method.lossless,
            extra_params=method.extra_params, structure=method.structure.value, task=q.task, category=q.category,
            subcategory=q.subcategory, difficulty=q.difficulty, question_id=q.id, turn=turn, repeat=repeat,
            scorer=q.scorer, reference=q.reference_for(turn),
            block_complexity=method.ctx.budget, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
            status="error" if gen is None else "ok", error=error, prompt_tokens=prompt_tokens, max_new_tokens=max_new)
        if gen is not None:
            row.prompt_tokens, row.new_tokens, row.steps = gen.prompt_tokens, len(gen.output_ids), gen.steps
            row.wall_time, row.prefill_time = gen.wall_time, gen.prefill_time
            row.accept_lengths, row.draft_sizes, row.budget_used = gen.accept_lengths, gen.draft_sizes, gen.budget_used
            row.draft_path_lengths = gen.draft_path_lengths
            row.step_draft_ms, row.step_verify_ms = gen.step_draft_ms, gen.step_verify_ms
            row.draft_time, row.verify_time, row.overhead_time = gen.draft_time, gen.verify_time, gen.overhead_time
            row.draft_depths = gen.draft_depths
            if gen.propose_time is not None:  # the step split (absent on CUDA without --time-steps)
                for part in PARTS:
                    setattr(row, f"step_{part}_ms", getattr(gen, f"step_{part}_ms"))
                    setattr(row, f"{part}_time", getattr(gen, f"{part}_time"))
            row.output_ids = gen.output_ids
            row.method_stats = gen.stats
            row.output_text = self.lm.tokenizer.decode(gen.output_ids, skip_special_tokens=True)
            row.output_pieces = token_pieces(self.lm.tokenizer, gen.output_ids)  # for `report --html`
        row.timestamp = now_iso()
        return row.to_dict()

    def _run_question(self, name: str, q, repeat: int, done: dict[tuple, dict], ar_rows: dict[tuple, dict]) -> None:
        method = self.methods[name]
        messages: list[dict] = []
        failed = None
        for turn, text in enumerate(q.turns):
            messages.append({"role": "user", "content": text})
            key = (name, q.task, q.id, turn, repeat, self.cfg.temperature)
            if key in done:  # resumed: reuse the stored answer as conversation history
                row = done[key]
                failed = failed or (row["error"] if row["status"] != "ok" else None)
                messages.append({"role": "assistant", "content": row.get("output_text", "")})
                self._remember(name, row)
                continue
            prompt_ids: list[int] = []
            if failed:
                row = self._row(name, method, q, turn, repeat, error=f"not run: an earlier turn failed ({failed})")
            else:
                try:
                    prompt_ids = self.prompter(messages)
                    cap = self.room.new_tokens(len(prompt_ids), self.cfg.max_new_tokens)
                    gen = self._generate(method, prompt_ids, sample_seed(self.cfg.seed, q.id, turn, repeat), cap)
                    row = self._row(name, method, q, turn, repeat, gen, max_new=cap)
                except Exception as e:  # noqa: BLE001 - a failing sample is recorded, never hidden
                    failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    row = self._row(name, method, q, turn, repeat, error=failed, prompt_tokens=len(prompt_ids))
            self.record(row, ar_rows)  # a row the store refuses (NaN, negative) is stored as an error row
            failed = failed or (row["error"] if row["status"] != "ok" else None)
            messages.append({"role": "assistant", "content": row["output_text"]})

    def _remember(self, name: str, row: dict) -> None:
        """A finished answer joins what method `name` remembers of this pass (docs/adding-a-method.md)."""
        if row["status"] == "ok":
            self.methods[name].remember(list(row["output_ids"]))

    def _forget(self, name: str) -> None:
        """Method `name` starts a pass of the run with nothing remembered."""
        self.methods[name].forget()

    # -- the whole run ------------------------------------------------------------------------
    def work(self, questions) -> list[tuple[str, Any, int]]:
        """(method, question, repeat) in run order: per question AR first, the others rotating."""
        return [(name, q, r) for r in range(self.cfg.repeats) for i, q in enumerate(questions)
                for name in self.order(i + r)]

    def order(self, k: int) -> list[str]:
        """AR (then each engine's own AR, `ENGINE:ar`), then the other methods rotated by `k` (slow
        drift of the machine favours none)."""
        first = ["ar"] + [n for n in self.methods if n != "ar" and is_baseline(n)]
        others = [n for n in self.methods if n not in first]
        k = k % len(others) if others else 0
        return first + others[k:] + others[:k]

    def unit_keys(self, unit) -> list[tuple]:
        """The row keys a unit of `work` writes."""
        name, q, r = unit
        return [(name, q.task, q.id, t, r, self.cfg.temperature) for t in range(len(q.turns))]

    def run_unit(self, unit, done: dict[tuple, dict], ar_rows: dict[tuple, dict]) -> None:
        name, q, r = unit
        self._run_question(name, q, r, done, ar_rows)

    def record(self, row: dict, ar_rows: dict[tuple, dict]) -> dict:
        """Compare a finished row with AR's, store it and report it."""
        key = question_key(row)
        if is_baseline(row["method"]):  # `ar`, or an engine's `ENGINE:ar` (engines/naming.py)
            ar_rows[ar_key(row["method"], key)] = row
        against = compared_with(row["method"])
        if against is not None:
            ref = ar_rows.get(ar_key(against, key))
            if ref is not None and ref["status"] == "ok" and row["status"] == "ok":
                row["ar_match"], row["first_mismatch"] = compare_ids(row["output_ids"], ref["output_ids"])
        self.store.append(row)
        self._remember(row["method"], row)
        self.live.add(row)
        self.on_row(row, self.live)
        return row

    def run(self, questions, progress: Callable[[int, int], None] | None = None) -> int:
        """Run every unit not yet in the store; return the number of error rows written."""
        done = {row_key(r): r for r in self.store.rows()}
        ar_rows = {ar_key(r["method"], question_key(r)): r for r in done.values() if is_baseline(r["method"])}
        for r in done.values():
            self.live.add(r)
        try:
            if len(self.temperatures) == 1:
                return self._run(questions, done, ar_rows, progress)
            return self._sweep(questions, done, ar_rows, progress)
        finally:  # servers an engine method started stop however the run ends (engines/server.py)
            self._close()

    def _close(self) -> None:
        for method in self.methods.values():
            getattr(method, "close", lambda: None)()

    def _sweep(self, questions, done: dict, ar_rows: dict, progress) -> int:
        """Every temperature in turn: the whole run at each (a temperature with nothing left to do
        is skipped), progress counted over all of them."""
        from specbench_cli.run.plan import plan_methods

        per, errors = len(self.work(questions)), 0
        for i, t in enumerate(self.temperatures):
            self.cfg = at_temperature(self.sweep_cfg, t)
            if i and any(k not in done for u in self.work(questions) for k in self.unit_keys(u)):
                self._close()  # planned and bound again: drafts follow the sampling (run/plan.py)
                self.setup(self.lm, plan_methods(self.cfg))
            step = None
            if progress:  # one bar over every temperature (a later temperature's start is no news)
                def step(d: int, n: int, base: int = i * per) -> None:
                    if d or not base:
                        progress(base + d, per * len(self.temperatures))
            errors = self._run(questions, done, ar_rows, step)
        return errors

    def _run(self, questions, done: dict, ar_rows: dict, progress) -> int:
        units = self.work(questions)
        pending = {i for i, u in enumerate(units) if any(k not in done for k in self.unit_keys(u))}
        todo = [units[i] for i in sorted(pending)]
        if todo and self.cfg.warmup:
            self.warmup(questions[0])
        total = len(units)
        finished = total - len(todo)
        if progress:
            progress(finished, total)
        passes: dict[str, int] = {}  # method -> the repeat its memory of the run belongs to
        for i, unit in enumerate(units):
            name, r = unit[0], unit[2]
            if passes.get(name) != r:
                self._forget(name)
                passes[name] = r
            if i not in pending:  # finished before a --resume: remembered, not rerun
                for key in self.unit_keys(unit):
                    self._remember(name, done[key])
                continue
            self.run_unit(unit, done, ar_rows)
            finished += 1
            if progress:
                progress(finished, total)
        return sum(1 for r in self.store.rows() if r["status"] != "ok")


def question_key(row: dict) -> tuple:
    """(task, question_id, turn, repeat, temperature): the answers a method's row is compared with."""
    return (row.get("task"), str(row["question_id"]), row["turn"], row.get("repeat", 0),
            float(row.get("temperature") or 0.0))


def ar_key(method: str, key: tuple) -> tuple:
    """Where `record` keeps a baseline's row: `ar`'s under the question key, `ENGINE:ar`'s under
    (method, *key)."""
    return key if method == "ar" else (method, *key)


def compare_ids(out: list[int], ref: list[int]) -> tuple[bool, Optional[int]]:
    if out == ref:
        return True, None
    for i, (a, b) in enumerate(zip(out, ref)):
        if a != b:
            return False, i
    return False, min(len(out), len(ref))


