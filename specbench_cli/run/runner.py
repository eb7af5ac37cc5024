"""`specbench run`: questions x methods -> rows in a run folder.

The run's options are config/, planning run/plan.py, the orchestration (checks, lock,
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

Batches (`--batch-size N`; batch size 1 is a batch of one, as in the loop): the run's questions
are cut, in order, into groups of N consecutive questions (the last group may be smaller); group
i is batch `batch_id` i of each repeat (rows at batch size 1 record no `batch_id`). Per group every
method decodes the same turn index of its questions together (decoding/decoder.py), a second turn only
after all first turns of the group (its prompt holds the first answer); questions without that
turn sit it out. Each sequence slot has its own drafter (run/replicas.py; at batch size 1 the
method itself). Rows stay one per question and turn, recording `batch_size` and `batch_id`. The
fairness rules above hold per group: AR decodes the group first, at the same N, then the other
methods in an order that rotates from group to group; every method of a question gets the same
cap and sampling seed at every batch size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from specbench_cli.config import RunConfig, at_temperature, temperatures
from specbench_cli.models.header import model_context_length
from specbench_cli.models.prompting import ChatPrompter, stop_token_ids, user_turn
from specbench_cli.names import AR, compared_with, is_baseline
from specbench_cli.run import limits
from specbench_cli.run.plan import method_context, plan_instance, plan_methods
from specbench_cli.run.replicas import replicas
from specbench_cli.store.rows import SampleRow, record_generation, row_key
from specbench_cli.store.runfolder import RunFolder, now_iso


def sample_seed(seed: int, question_id: str, turn: int, repeat: int) -> int:
    h = hashlib.sha256(f"{seed}|{question_id}|{turn}|{repeat}".encode()).digest()
    return int.from_bytes(h[:8], "little") & 0x7FFFFFFFFFFFFFFF


# the keys of a row the progress line's numbers read (report/metrics.py `question_throughputs`,
# `mean_accepted_tokens`)
LIVE_KEYS = ("task", "category", "question_id", "turn", "repeat", "batch_size", "temperature", "status",
             "new_tokens", "wall_time", "accept_lengths", "steps")


@dataclass
class Live:
    """Running numbers per method for the progress line, computed as the tables compute them
    (report/metrics.py): tok/s the mean over questions of each question's tokens / seconds (all
    its turns), #MAT pooled over steps. A question whose turn failed is left out, as in the tables."""

    rows: dict[str, list[dict]] = field(default_factory=dict)  # entry -> its rows so far (`LIVE_KEYS`)
    sweep: bool = False  # several temperatures: one entry per method and temperature
    parts: dict[str, str] = field(default_factory=dict)  # entry -> its part of the line, until its next row

    def add(self, row: dict) -> None:
        m = f"{row['method']} T={row.get('temperature', 0.0):g}" if self.sweep else row["method"]
        # one group per entry of the line: the entry stands for the method and its label
        self.rows.setdefault(m, []).append({**{k: row[k] for k in LIVE_KEYS if k in row}, "method": m,
                                            "method_label": m, "block_complexity": 0})
        self.parts.pop(m, None)

    def tokens_per_s(self, method: str) -> float:
        from specbench_cli.report import metrics

        rate = metrics.mean_throughput(metrics.question_throughputs(self.rows.get(method, [])))
        return 0.0 if math.isnan(rate) else rate  # no question finished yet: 0

    def mat(self, method: str) -> float:
        from specbench_cli.report import metrics

        ok = [r for r in self.rows.get(method, []) if r["status"] == "ok"]
        tau = metrics.mean_accepted_tokens([r["accept_lengths"] for r in ok], [r["steps"] for r in ok])
        return 0.0 if math.isnan(tau) else tau  # no step yet: 0

    def line(self) -> str:
        for m in self.rows:
            if m not in self.parts:
                self.parts[m] = f"{m} {self.tokens_per_s(m):.1f} tok/s #MAT {self.mat(m):.2f}"
        return " | ".join(self.parts[m] for m in self.rows)


def _error_text(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


class Runner:
    """The run at every batch size (module doc)."""

    def __init__(self, cfg: RunConfig, store: RunFolder, on_row: Callable[[dict, Live], None] | None = None) -> None:
        self.sweep_cfg, self.temperatures = cfg, temperatures(cfg)
        self.cfg = at_temperature(cfg, self.temperatures[0])  # the settings of the temperature being decoded
        self.store = store
        self.on_row = on_row or (lambda row, live: None)
        self.live = Live(sweep=len(self.temperatures) > 1)

    # -- set-up -------------------------------------------------------------------------------
    def setup(self, lm, planned: Optional[dict] = None) -> None:
        """Bind the planned methods (`plan_methods`: MethodInstance -> method) to the loaded target."""
        import torch

        from specbench_cli.decoding.decoder import Decoder

        self.lm = lm
        self.sampling = method_context(self.cfg).sampling
        # the step split: free on a CPU, on CUDA only when asked for (a sync per part; docs/metrics.md)
        self.decoder = Decoder(lm.target, stop_token_ids(lm.tokenizer, lm.target), self.sampling,
                               time_steps=bool(self.cfg.measure.time_steps))
        self.prompter = ChatPrompter(lm.tokenizer, self.cfg.model.prompt_template)
        planned = planned if planned is not None else plan_methods(self.cfg)
        # every method of a question gets the same cap, so answers stay comparable with AR's
        self.room = limits.Room(model_context_length(lm.target), [m.ctx.budget for m in planned.values()])
        self.methods, self.instances = {}, {}  # by instance label (the rows' `method`)
        for inst, m in planned.items():
            # a draft model loaded for a method inherits how the target was loaded (--trust-remote-code)
            m.ctx = dataclasses.replace(m.ctx, trust_remote_code=getattr(lm, "trust_remote_code", False))
            self.methods[inst.label] = m.bind(lm.target, lm.tokenizer)
            self.instances[inst.label] = inst
        self.torch = torch

        def fresh(name: str, method) -> Any:
            twin = plan_instance(self.cfg, self.instances[name], method.ctx.budget)
            twin.ctx = dataclasses.replace(twin.ctx, trust_remote_code=method.ctx.trust_remote_code,
                                           adaptive=method.ctx.adaptive)
            return twin.bind(lm.target, lm.tokenizer)

        # one drafter per sequence slot of a batch: the method itself, then copies (run/replicas.py)
        n = self.cfg.decoding.batch_size
        self.drafters = {name: replicas(m, n, lambda name=name, m=m: fresh(name, m)) for name, m in self.methods.items()}

    # -- one batch of generations -------------------------------------------------------------
    def _generate(self, name: str, prompts: list[list[int]], caps: list[int], seeds: list[int]) -> list:
        """Method `name`'s answers to `prompts` decoded together, each within its cap, sampled
        from its own seed: one `Generation` each (decoding/decoder.py)."""
        method = self.methods[name]
        if getattr(method, "decodes_itself", False):  # an engine's own speculation (servers/engine_method.py), batch size 1
            run_dir = getattr(self.store, "path", None)
            return [method.generate(ids, cap, self.decoder.eos_ids, run_dir) for ids, cap in zip(prompts, caps)]
        gens = [self.torch.Generator().manual_seed(s) for s in seeds] if not self.sampling.greedy else None
        drafters = self.drafters[name][: len(prompts)]
        return self.decoder.generate_batch(drafters, prompts, caps, method.ctx.budget, gens,
                                           [d.ctx.adaptive for d in drafters])

    def warmup(self, question) -> None:
        """Every method decodes a short answer to `question` once, at the run's batch size, untimed."""
        ids = self.prompter(user_turn(question.turns[0]))
        n = self.cfg.decoding.batch_size
        for name in self.methods:
            self._generate(name, [ids] * n, [min(16, self.cfg.decoding.max_new_tokens)] * n, [0] * n)

    def _row(self, name: str, method, q, turn: int, repeat: int, gen=None, error: str | None = None,
             prompt_tokens: int = 0, max_new: Optional[int] = None, batch_id: Optional[int] = None) -> dict:
        """The SampleRow of one turn: measured from `gen`, or an error row."""
        row = SampleRow(
            batch_size=self.cfg.decoding.batch_size, batch_id=batch_id,
            method=name, method_label=self.instances[name].row_label(method.label(), self.cfg.budget.block_complexity), method_params=method.params(),
            lossless=method.lossless,
            extra_params=method.extra_params, structure=method.structure.value, task=q.task, category=q.category,
            subcategory=q.subcategory, difficulty=q.difficulty, question_id=q.id, turn=turn, repeat=repeat,
            scorer=q.scorer, reference=q.reference_for(turn),
            block_complexity=method.ctx.budget, temperature=self.cfg.decoding.temperature,
            top_p=self.cfg.decoding.top_p,
            status="error" if gen is None else "ok", error=error, prompt_tokens=prompt_tokens, max_new_tokens=max_new)
        if gen is not None:
            record_generation(row, gen, self.lm.tokenizer)
        row.timestamp = now_iso()
        return row.to_dict()

    def _remember(self, name: str, row: dict) -> None:
        """A finished answer joins what method `name` remembers of this pass (docs/adding-a-method.md),
        in every slot's drafter: a later group sees what a batch-1 run would have seen by then
        (answers of the same group are decoded together, so none sees another's)."""
        if row["status"] == "ok":
            for drafter in self.drafters[name]:
                drafter.remember(list(row["output_ids"]))

    def _refer(self, name: str, todo: list[tuple[Any, list[int]]], turn: int, repeat: int,
               ar_rows: dict[tuple, dict]) -> None:
        """A method that drafts from AR's answer (`reference_drafts`: synthetic) is handed the `ar`
        row of each question it is about to decode (same turn, repeat and temperature), keyed by
        the prompt it decodes; AR decodes each group first, and a resumed run has AR's stored rows."""
        if not getattr(self.methods[name], "reference_drafts", False):
            return
        for q, prompt_ids in todo:
            ref = ar_rows.get((q.task, q.id, turn, repeat, float(self.cfg.decoding.temperature or 0.0)))
            if ref is not None and ref.get("status") == "ok" and ref.get("output_ids") is not None:
                for drafter in self.drafters[name]:
                    drafter.refer(list(prompt_ids), list(ref["output_ids"]))

    def _forget(self, name: str) -> None:
        """Method `name` starts a pass of the run with nothing remembered."""
        for drafter in self.drafters[name]:
            drafter.forget()

    # -- the whole run ------------------------------------------------------------------------
    def work(self, questions) -> list[tuple[str, tuple, int, Optional[int]]]:
        """(method, group of questions, repeat, batch id) in run order: per group AR first, the
        others rotating; the batch id is None at batch size 1 (rows record none)."""
        n = self.cfg.decoding.batch_size
        groups = [tuple(questions[i:i + n]) for i in range(0, len(questions), n)]
        return [(name, group, r, b if n > 1 else None) for r in range(self.cfg.measure.repeats)
                for b, group in enumerate(groups) for name in self.order(b + r)]

    def order(self, k: int) -> list[str]:
        """AR (then each engine's own AR, `ENGINE:ar`), then the other methods rotated by `k` (slow
        drift of the machine favours none)."""
        first = [AR] + [n for n in self.methods if n != AR and is_baseline(n)]
        others = [n for n in self.methods if n not in first]
        k = k % len(others) if others else 0
        return first + others[k:] + others[:k]

    def unit_keys(self, unit) -> list[tuple]:
        """The row keys a unit of `work` writes."""
        name, group, r, _ = unit
        return [(name, q.task, q.id, t, r, self.cfg.decoding.temperature) for q in group for t in range(len(q.turns))]

    def run_unit(self, unit, done: dict[tuple, dict], ar_rows: dict[tuple, dict]) -> None:
        """Method `name` answers a group of questions turn by turn: each turn of every question
        that has it decoded together; a turn stored before (--resume) is the history of the next,
        and after a failed turn the question's later turns are error rows that say so."""
        name, group, repeat, batch_id = unit
        method = self.methods[name]
        messages: dict[int, list[dict]] = {i: [] for i in range(len(group))}
        failed: dict[int, str] = {}
        for turn in range(max(len(q.turns) for q in group)):
            members = [i for i, q in enumerate(group) if turn < len(q.turns)]
            rows: dict[int, dict] = {}
            todo: list[tuple[int, list[int], int]] = []  # (member, prompt ids, cap)
            for i in members:
                q = group[i]
                messages[i].append({"role": "user", "content": q.turns[turn]})
                key = (name, q.task, q.id, turn, repeat, self.cfg.decoding.temperature)
                if key in done:  # resumed: reuse the stored answer as conversation history
                    row = done[key]
                    if row["status"] != "ok" and i not in failed:
                        failed[i] = row["error"]
                    messages[i].append({"role": "assistant", "content": row.get("output_text", "")})
                    self._remember(name, row)
                    continue
                if i in failed:
                    rows[i] = self._row(name, method, q, turn, repeat, error=f"not run: an earlier turn failed "
                                        f"({failed[i]})", batch_id=batch_id)
                    continue
                prompt_ids: list[int] = []
                try:
                    prompt_ids = self.prompter(messages[i])
                    new = self.room.new_tokens(len(prompt_ids), self.cfg.decoding.max_new_tokens)
                    todo.append((i, prompt_ids, new))
                except Exception as e:  # noqa: BLE001 - a failing sample is recorded, never hidden
                    failed[i] = _error_text(e)
                    rows[i] = self._row(name, method, q, turn, repeat, error=failed[i],
                                        prompt_tokens=len(prompt_ids), batch_id=batch_id)
            if todo:
                self._refer(name, [(group[i], p) for i, p, _ in todo], turn, repeat, ar_rows)
                seeds = [sample_seed(self.cfg.decoding.seed, group[i].id, turn, repeat) for i, _, _ in todo]
                try:
                    gens = self._generate(name, [p for _, p, _ in todo], [c for _, _, c in todo], seeds)
                    for (i, _, cap), gen in zip(todo, gens):
                        rows[i] = self._row(name, method, group[i], turn, repeat, gen, max_new=cap, batch_id=batch_id)
                except Exception as e:  # noqa: BLE001 - the whole batch failed: every member's row says so
                    for i, prompt_ids, _ in todo:
                        failed[i] = _error_text(e)
                        rows[i] = self._row(name, method, group[i], turn, repeat, error=failed[i],
                                            prompt_tokens=len(prompt_ids), batch_id=batch_id)
            for i in members:
                if i in rows:
                    row = self.record(rows[i], ar_rows)  # a row the store refuses (NaN, negative) is stored as an error row
                    if row["status"] != "ok":
                        failed.setdefault(i, row["error"])
                    messages[i].append({"role": "assistant", "content": row["output_text"]})

    def record(self, row: dict, ar_rows: dict[tuple, dict]) -> dict:
        """Compare a finished row with AR's, store it and report it."""
        key = question_key(row)
        if is_baseline(row["method"]):  # `ar`, or an engine's `ENGINE:ar` (names.py)
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
        finally:  # servers an engine method started stop however the run ends (servers/server.py)
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
                self.setup(self.lm, plan_methods(self.cfg, list(self.instances.values())))
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
        if todo and self.cfg.measure.warmup:
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
    return key if method == AR else (method, *key)


def compare_ids(out: list[int], ref: list[int]) -> tuple[bool, Optional[int]]:
    if out == ref:
        return True, None
    for i, (a, b) in enumerate(zip(out, ref)):
        if a != b:
            return False, i
    return False, min(len(out), len(ref))


