"""`specbench run --batch-size N` (N > 1): questions decoded N at a time.

The run's questions are cut, in order, into groups of N consecutive questions (the last group
may be smaller); group i is batch `batch_id` i of each repeat. Per group every method decodes
the same turn index of its questions together (engine/loop.py), a second turn only after all
first turns of the group (its prompt holds the first answer); questions without that turn sit
it out. Each sequence slot has its own drafter (run/replicas.py). Rows stay one per question
and turn, recording `batch_size` and `batch_id`.

The fairness rules of runner.py hold per group instead of per question: AR decodes the group
first, at the same N, then the other methods in an order that rotates from group to group;
every method of a question gets the same cap and sampling seed as at batch size 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specbench_cli.models.prompting import user_turn
from specbench_cli.run.plan import plan_instance
from specbench_cli.run.replicas import replicas
from specbench_cli.run.runner import Runner, sample_seed


def _error_text(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


class BatchRunner(Runner):
    """The runner at batch size N > 1 (module doc)."""

    def setup(self, lm, planned=None) -> None:
        super().setup(lm, planned)

        def fresh(spec: str, method) -> Any:
            twin = plan_instance(self.cfg, spec, method.ctx.budget)
            twin.ctx = dataclasses.replace(twin.ctx, trust_remote_code=method.ctx.trust_remote_code)
            return twin.bind(lm.target, lm.tokenizer)

        n = self.cfg.batch_size
        self.drafters = {name: replicas(m, n, lambda name=name, m=m: fresh(name, m)) for name, m in self.methods.items()}

    def _remember(self, name: str, row: dict) -> None:
        """Every slot's drafter remembers the answer: a later group sees what a batch-1 run would
        have seen by then (answers of the same group are decoded together, so none sees another's)."""
        if row["status"] == "ok":
            for drafter in self.drafters[name]:
                drafter.remember(list(row["output_ids"]))

    def _forget(self, name: str) -> None:
        for drafter in self.drafters[name]:
            drafter.forget()

    def _generate_batch(self, name: str, prompts: list[list[int]], caps: list[int], seeds: list[int]):
        gens = [self.torch.Generator().manual_seed(s) for s in seeds] if not self.sampling.greedy else None
        drafters = self.drafters[name][: len(prompts)]
        return self.decoder.generate_batch(drafters, prompts, caps, self.methods[name].ctx.budget, gens,
                                           [d.ctx.adaptive for d in drafters])

    def warmup(self, question) -> None:
        ids = self.prompter(user_turn(question.turns[0]))
        n = self.cfg.batch_size
        for name in self.methods:
            self._generate_batch(name, [ids] * n, [min(16, self.cfg.max_new_tokens)] * n, [0] * n)

    # -- units: (method, group of questions, repeat, batch id) ------------------------------
    def work(self, questions) -> list[tuple[str, tuple, int, int]]:
        n = self.cfg.batch_size
        groups = [tuple(questions[i:i + n]) for i in range(0, len(questions), n)]
        return [(name, group, r, b) for r in range(self.cfg.repeats) for b, group in enumerate(groups)
                for name in self.order(b + r)]

    def unit_keys(self, unit) -> list[tuple]:
        name, group, r, _ = unit
        return [(name, q.task, q.id, t, r, self.cfg.temperature) for q in group for t in range(len(q.turns))]

    def run_unit(self, unit, done: dict[tuple, dict], ar_rows: dict[tuple, dict]) -> None:
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
                key = (name, q.task, q.id, turn, repeat, self.cfg.temperature)
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
                    todo.append((i, prompt_ids, self.room.new_tokens(len(prompt_ids), self.cfg.max_new_tokens)))
                except Exception as e:  # noqa: BLE001 - a failing sample is recorded, never hidden
                    failed[i] = _error_text(e)
                    rows[i] = self._row(name, method, q, turn, repeat, error=failed[i],
                                        prompt_tokens=len(prompt_ids), batch_id=batch_id)
            if todo:
                seeds = [sample_seed(self.cfg.seed, group[i].id, turn, repeat) for i, _, _ in todo]
                try:
                    gens = self._generate_batch(name, [p for _, p, _ in todo], [c for _, _, c in todo], seeds)
                    for (i, _, cap), gen in zip(todo, gens):
                        rows[i] = self._row(name, method, group[i], turn, repeat, gen, max_new=cap, batch_id=batch_id)
                except Exception as e:  # noqa: BLE001 - the whole batch failed: every member's row says so
                    for i, prompt_ids, _ in todo:
                        failed[i] = _error_text(e)
                        rows[i] = self._row(name, method, group[i], turn, repeat, error=failed[i],
                                            prompt_tokens=len(prompt_ids), batch_id=batch_id)
            for i in members:
                if i in rows:
                    row = self.record(rows[i], ar_rows)  # the store may have made it an error row
                    if row["status"] != "ok":
                        failed.setdefault(i, row["error"])
                    messages[i].append({"role": "assistant", "content": row["output_text"]})
