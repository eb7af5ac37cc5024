"""fastcot and its cot baseline (lossy): the exact part is AR's, the cap stops the rationale,
the answer after the trigger is what plain greedy decoding gives from the same text, and
the run/report path carries scorer, stats and the lossy mark."""

from __future__ import annotations

import json

import pytest
from helpers.cli import cli, only_run_dir, run_rows

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.models.prompting import encode_chat, stop_token_ids, user_turn
from specbench_cli.targets import as_target

BC = 6
MAX_NEW = 30


@pytest.fixture(scope="module")
def setup(tiny_model, tiny_tok):
    ctx = MethodContext(target=tiny_model, tokenizer=tiny_tok, budget=BC)
    dec = Decoder(as_target(tiny_model), stop_token_ids(tiny_tok, tiny_model))
    prompts = [encode_chat(tiny_tok, user_turn(t)) for t in ("what is the sum of one and two",
                                                              "write a short poem about the sea")]
    return ctx, dec, prompts


def _greedy(dec, ctx, ids, n):
    return dec.generate(methods.get("ar").create(ctx), ids, n, 1).output_ids


def test_cot_is_ar_then_the_trigger_then_the_greedy_answer(setup):
    ctx, dec, prompts = setup
    cot = methods.get("cot").create(ctx, answer_tokens=5)
    for p in prompts:
        ar = _greedy(dec, ctx, p, MAX_NEW)
        body = [t for t in ar if t not in dec.eos_ids]
        out = dec.generate(cot, p, MAX_NEW, BC)
        trig = cot.trigger_ids
        assert out.output_ids[:len(body)] == body
        assert out.output_ids[len(body):len(body) + len(trig)] == trig
        # the answer continues the same text exactly as a fresh greedy decode would
        assert out.output_ids[len(body) + len(trig):] == _greedy(dec, ctx, p + body + trig, 5)
        assert out.stats["iterations"] == len(ar) and out.stats["answer_tokens"] == out.epilogue_tokens


@pytest.mark.parametrize("cap", [1, 4, 9])
def test_fastcot_cap_exact_prefix_approximate_tokens_and_answer(setup, cap):
    ctx, dec, prompts = setup
    fc = methods.get("fastcot").create(ctx, max_iters=cap, answer_tokens=4)
    for p in prompts:
        ar = _greedy(dec, ctx, p, MAX_NEW)
        out = dec.generate(fc, p, MAX_NEW, BC)
        s = out.stats
        assert s["iterations"] == cap == out.steps + 1 and s["stopped"] == "cap"
        exact, approx = s["exact_tokens"], s["approx_tokens"]
        assert exact == 1 + sum(out.accept_lengths) and exact >= cap
        assert out.output_ids[:exact] == ar[:exact]            # the exact part is AR's
        # window (c = BC-1) + the prediction after it; the prefill alone (cap 1) has no window
        assert (0 < approx <= BC) if cap > 1 else approx == 0
        text = out.output_ids[:exact + approx] + fc.trigger_ids
        assert out.output_ids[:len(text)] == text
        # the cache after a Jacobi phase is cropped correctly: same answer as a fresh decode
        assert out.output_ids[len(text):] == _greedy(dec, ctx, p + text, 4)


def test_fastcot_without_a_cap_or_window_keeps_ar_tokens(setup):
    ctx, dec, prompts = setup
    for options in ({}, {"window": 0}, {"approx": False, "max_iters": 3}):
        fc = methods.get("fastcot").create(ctx, **options)
        for p in prompts:
            ar = _greedy(dec, ctx, p, MAX_NEW)
            out = dec.generate(fc, p, MAX_NEW, BC)
            exact = out.stats["exact_tokens"]
            assert out.output_ids[:min(exact, MAX_NEW)] == ar[:exact]
            if not options.get("max_iters"):
                assert exact >= len(ar)
            if options.get("approx") is False:
                assert out.stats["approx_tokens"] == 0


def test_question_tokens_initialise_the_buffer(setup, tiny_tok):
    ctx, _, prompts = setup
    fc = methods.get("fastcot").create(ctx)
    question = tiny_tok.encode("what is the sum of one and two", add_special_tokens=False)
    assert fc.question_tokens(prompts[0]) == question
    fc.reset(prompts[0])
    fc._grow(2 * len(question) + 1)
    assert fc.buf[:len(question)] == question and fc.buf[len(question):2 * len(question)] == question


@pytest.mark.parametrize("options, message", [
    ({"window": -1}, "fastcot.window must be between 0 and 4096"),
    ({"max_iters": -2}, "fastcot.max_iters must be between 0 and 1000000"),
    ({"answer_tokens": 0}, "answer_tokens must be between 1 and 512"),
    ({"init": "zeros"}, "fastcot.init must be one of"),
])
def test_bad_options_are_usage_errors(options, message):
    with pytest.raises(UsageError, match=message):
        methods.get("fastcot")(MethodContext(budget=BC), **options)


def test_lossy_methods_are_declared_lossy_and_not_run_by_default():
    from specbench_cli.run.plan import default_methods

    for name in ("fastcot", "cot"):
        assert methods.describe(name)["lossless"] is False and methods.get(name).lossless is False
    assert not {"fastcot", "cot"} & set(default_methods())


def test_run_and_report_carry_scores_stats_and_the_lossy_mark(tiny_model_dir, tmp_path, capsys):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("\n".join(json.dumps({"question_id": i, "category": "math", "turns": ["what is one and two"],
                                           "reference": [f"#### {i}"], "scorer": "gsm8k"}) for i in (1, 2)))
    out_dir = tmp_path / "out"
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--tasks", "jsonl", "--questions", str(qfile),
                        "--methods", "cot,fastcot", "-o", "fastcot.max_iters=3", "--bc", str(BC),
                        "--max-new-tokens", "12", "--output-dir", str(out_dir), "--threads", "1", "--no-report"],
                       capsys)
    assert code == 0, err
    run = only_run_dir(out_dir)
    rows = run_rows(run)
    assert {r["method"] for r in rows} == {"ar", "cot", "fastcot"}
    assert all(r["scorer"] == "gsm8k" and r["reference"] == f"#### {r['question_id']}" for r in rows)
    fc = [r for r in rows if r["method"] == "fastcot"]
    assert all(r["method_stats"]["iterations"] == 3 and r["lossless"] is False for r in fc)
    code, out, _ = cli(["report", str(run), "--format", "markdown", "--no-plots"], capsys)
    assert code == 0 and "fastcot(max_iters=3) (lossy)" in out and "Acc" in out and "cot (lossy)" in out


def test_a_questions_file_with_an_unknown_scorer_is_rejected(tmp_path, capsys):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"question_id": 1, "turns": ["x"], "scorer": "bleu"}) + "\n")
    code, _, err = cli(["run", "--tasks", "jsonl", "--questions", str(qfile)], capsys)
    assert code == 2 and "unknown scorer 'bleu'" in err
