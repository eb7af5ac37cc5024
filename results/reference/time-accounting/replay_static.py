"""Replay samd's automaton drafts offline on known greedy answers, with and without a corpus's
static automaton: how many steps each automaton drafts and how many tokens it gets accepted.

    python replay_static.py SAMPLES.jsonl [DATASTORE]

SAMPLES.jsonl: a run's rows on Spec-Bench (the `ar` rows' answers are replayed; the prompts are
rebuilt with the chat template the run used, `auto`). Only the automaton chains are replayed
exactly: a step where neither automaton drafts is counted as accepting nothing (in a run, Token
Recycling drafts it). BC 10 (9 draft tokens), threshold 2, static_bias 0-8 and 100 (= off).
"""

import json
import sys
from pathlib import Path

from specbench_cli import tasks
from specbench_cli.methods.retrieval import datastore as store
from specbench_cli.methods.samd import SuffixAutomaton, corpus_automaton
from specbench_cli.models.load import load_tokenizer
from specbench_cli.models.prompting import ChatPrompter


def main(rows_file: str, ds: str | None, n: int = 9, threshold: int = 2) -> None:
    prompter = ChatPrompter(load_tokenizer("smollm2-135m"), "auto")
    questions = {q.id: q for q in tasks.get("spec_bench").load(None)}
    rows = [json.loads(line) for line in open(rows_file, encoding="utf-8")]
    answers = {(r["question_id"], r["turn"]): r for r in rows if r["method"] == "ar" and r["status"] == "ok"}
    static = None
    if ds:
        meta = store.read_meta(Path(ds), index=False, who="replay")
        static = corpus_automaton(store.read_sequences(Path(ds), meta, "replay"))
    for bias in ([None] if static is None else [0, 2, 4, 6, 8, 100]):
        steps = chain_steps = accepted = static_steps = static_accepted = 0
        for (qid, turn), row in answers.items():
            messages = []
            for t in range(turn + 1):
                messages.append({"role": "user", "content": questions[qid].turns[t]})
                if t < turn:
                    messages.append({"role": "assistant", "content": answers[(qid, t)]["output_text"]})
            out = row["output_ids"]
            sam, at = SuffixAutomaton(), (0, 0)
            for t in prompter(messages):
                sam.add(t)
                if static is not None:
                    at = static.step(*at, t)
            i = 0
            while i < len(out):
                cap = min(n, len(out) - i - 1)
                found = [(sam.match, "sam")] + ([(at[1] - bias, "static")] if bias is not None else [])
                chain, kind = [], None
                for match, k in sorted(found, key=lambda f: -f[0]):
                    if match >= threshold and cap > 0:
                        chain = sam.continuation(cap) if k == "sam" else static.continuation(cap, at[0])
                    if chain:
                        kind = k
                        break
                a = 0
                while a < len(chain) and chain[a] == out[i + a]:
                    a += 1
                steps += 1
                if chain:
                    chain_steps += 1
                    accepted += a
                    if kind == "static":
                        static_steps += 1
                        static_accepted += a
                for t in out[i:i + a + 1]:
                    sam.add(t)
                    if static is not None:
                        at = static.step(*at, t)
                i += a + 1
        print(f"static_bias={bias}: {steps} steps; automaton steps {chain_steps} ({accepted / max(chain_steps, 1):.2f} "
              f"accepted each), of them the corpus's {static_steps} ({static_accepted / max(static_steps, 1):.2f} each)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
