"""Teacher-forced top-1 of trained heads on a run's own AR answers, per Spec-Bench category.

Why: a head's held-out top-1 is measured on its training distribution; on Spec-Bench the first
drafted token is accepted at a much lower rate. This scores a head exactly where the decoder uses
it: the target reads each first-turn question (prompt template as `specbench run`) plus AR's
greedy answer from a run's samples.jsonl, one forward, and the head predicts every answer token
from the features before it (EAGLE: pair (feature t, token t+1) -> token t+2; Medusa head i:
feature t -> token t+2+i). Argmax over the full vocabulary, and over the head's draft vocabulary
(training sub-vocabulary + the prompt's tokens, the methods' `vocab=auto`). `--window W` lets the
EAGLE head attend to the last W pairs only (tests whether long prompts hurt it).

usage: python results/reference/heads/heads_teacher_forced.py SAMPLES.jsonl HEADS_DIR... [--questions Q.jsonl] [--window W] [-o OUT.md]
"""

from __future__ import annotations

import sys

import argparse
import collections
import json
from pathlib import Path

import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_json import write_table  # noqa: E402

from specbench_cli.models.load import load_model
from specbench_cli.models.prompting import encode_chat, user_turn
from specbench_cli.models.prompting import set_threads
from specbench_cli.methods.heads.checkpoint import load_draft_vocab, load_heads


def next_but_one_logits(head, feats: torch.Tensor, ids: torch.Tensor, window: int) -> torch.Tensor:
    """Logits [n, V] whose row t predicts token t+2: EAGLE from the pair (feature t, token t+1)
    (rows before the window are NaN), Medusa's head 1 from feature t."""
    n = ids.shape[0]
    if head.kind == "eagle":
        cut = max(0, n - 1 - window) if window else 0
        _, lg = head.step(head.new_cache(), feats[cut:-1], ids[cut + 1:], torch.arange(cut, n - 1))
        return torch.cat([torch.full((cut, lg.shape[1]), float("nan")), lg])
    return head.head_logits(feats)[:, 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("samples", type=Path)
    ap.add_argument("heads", type=Path, nargs="+")
    ap.add_argument("--questions", type=Path, default=Path("../shared/data/spec_bench/question.jsonl"))
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    set_threads(1)
    qs = {str(q["question_id"]): q for q in map(json.loads, args.questions.read_text().splitlines()) if q}
    rows = [r for r in map(json.loads, args.samples.read_text().splitlines())
            if r["method"] == "ar" and r["turn"] == 0 and r["status"] == "ok"]
    lm = load_model(json.loads((args.samples.parent / "manifest.json").read_text())["config"]["model"])
    seqs = []
    with torch.no_grad():
        for r in rows:
            p = encode_chat(lm.tokenizer, user_turn(qs[str(r["question_id"])]["turns"][0]))
            ids = torch.tensor(p + r["output_ids"])
            seqs.append((r["category"], len(p), ids, lm.model.get_decoder()(input_ids=ids[None]).last_hidden_state[0]))
    lines = [f"Teacher-forced top-1 on the AR answers of {args.samples} ({len(rows)} first turns; "
             f"float32; window {args.window or 'none'}). Cells: EAGLE / Medusa head 1 top-1 over the full "
             "vocabulary (draft vocabulary in brackets).", ""]
    cats = sorted({c for c, *_ in seqs})
    lines += ["| heads | " + " | ".join(cats) + " | all |", "| --- |" + " ---: |" * (len(cats) + 1)]
    for folder in args.heads:
        head = load_heads(folder, lm.model).eval()
        vocab = load_draft_vocab(folder)
        acc = collections.defaultdict(lambda: [0, 0, 0])
        with torch.no_grad():
            for cat, plen, ids, feats in seqs:
                lg = next_but_one_logits(head, feats, ids, args.window)
                dv = torch.unique(torch.cat([vocab, ids[:plen]])) if vocab is not None else torch.arange(lg.shape[1])
                for t in range(plen - 1, len(ids) - 2):  # row t predicts answer token t+2
                    a = acc[cat]
                    a[0] += int(lg[t].argmax() == ids[t + 2])
                    a[1] += int(dv[lg[t, dv].argmax()] == ids[t + 2])
                    a[2] += 1
        tot = [sum(a[i] for a in acc.values()) for i in range(3)]
        cell = lambda a: f"{a[0] / a[2]:.3f} ({a[1] / a[2]:.3f})" if a[2] else "–"  # noqa: E731
        lines.append(f"| {folder.name} | " + " | ".join(cell(acc[c]) for c in cats) + f" | {cell(tot)} |")
    write_table(lines, args.output)


if __name__ == "__main__":
    main()
