"""The `suffix` method: its options, the global tree of earlier answers (what it holds, when it
is emptied, that rows record it, that `--resume` rebuilds it so drafting does not change), the
hybrid with a model drafter, and `--bc auto` and sweeps with it."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.cli import cli, only_run_dir, run_rows
from helpers.tiny import EOS

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.drafter import DecodeState
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.methods.suffix import SuffixDecoding
from specbench_cli.targets import as_target


def _suffix(budget=8, **options):
    m = SuffixDecoding(MethodContext(budget=budget), **options)
    return m


def _state(ids, prompt_len=2, budget=8, remaining=50):
    return DecodeState(ids=list(ids), prompt_len=prompt_len, budget=budget, remaining=remaining)


@pytest.mark.parametrize("options, message", [
    ({"max_tree_depth": 0}, "suffix.max_tree_depth must be between 1 and 512"),
    ({"max_spec_factor": -1}, "suffix.max_spec_factor must be between 0.0 and 64.0"),
    ({"min_token_prob": 1.5}, "suffix.min_token_prob must be between 0.0 and 1.0"),
    ({"max_cached_requests": -1}, "suffix.max_cached_requests must be between 0 and 1000000"),
    ({"fallback": "eagle2"}, "suffix.fallback must be one of none, dflash, eagle, eagle3, hydra, medusa, pld, recycling"),
    ({"fallback": "eagle"}, "suffix.fallback=eagle drafts from trained heads: pass -o suffix.heads=DIR"),
    ({"fallback": "pld", "heads": "x"}, "suffix.heads is for a head fallback"),
    ({"heads": "x"}, "suffix.heads is for a head fallback"),
])
def test_bad_options_are_usage_errors(options, message):
    with pytest.raises(UsageError, match=message):
        _suffix(**options)


def test_labels_name_the_fallback_by_its_heads_not_their_folder(tiny_heads):
    from specbench_cli.methods.samd import SAMDecoding

    for cls in (SuffixDecoding, SAMDecoding):
        label = cls(MethodContext(budget=6), fallback="hydra", heads=tiny_heads["hydra"]).label()
        assert label == f"{cls.name}(fallback=hydra(H=3,K=2))"
    assert _suffix(fallback="pld", max_spec_factor=2.0).label() == "suffix(max_spec_factor=2.0,fallback=pld)"


def test_an_earlier_answer_is_drafted_from_the_global_tree():
    m = _suffix()
    m.reset([1, 2])
    assert len(m.propose(_state([1, 2, 5, 6, 7]))) == 0  # nothing to continue from yet
    m.remember([5, 6, 7, 8, 9, 10, 11])
    m.reset([1, 2])
    d = m.propose(_state([1, 2, 5, 6, 7]))
    assert d.tokens[:3] == [8, 9, 10] and d.parents[:3] == [-1, 0, 1]
    assert m.stats() == {"global_requests": 1, "steps_local": 0, "steps_global": 1, "steps_none": 0}
    m.forget()
    m.reset([1, 2])
    assert len(m.propose(_state([1, 2, 5, 6, 7]))) == 0 and m.stats()["global_requests"] == 0


def test_the_request_tree_wins_ties_and_holds_the_prompt():
    m = _suffix()
    m.remember([3, 4, 9])
    m.reset([3, 4, 5, 1])
    d = m.propose(_state([3, 4, 5, 1, 3, 4], prompt_len=4))
    # both trees continue "3 4" (with 5 and with 9) at the same score: the request's own wins
    assert d.tokens[0] == 5 and m.counts["local"] == 1


def test_the_global_tree_keeps_the_newest_answers():
    m = _suffix(max_cached_requests=2)
    for answer in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]):
        m.remember(answer)
    assert m.global_tree.num_seqs() == 2 and m.global_tree.check_integrity() == ""
    m.reset([0])
    assert len(m.propose(_state([0, 1, 2], prompt_len=1))) == 0      # the oldest answer went
    assert m.propose(_state([0, 9, 10], prompt_len=1)).tokens[:2] == [11, 12]
    off = _suffix(max_cached_requests=0)
    off.remember([1, 2, 3])
    assert off.global_tree.num_seqs() == 0


def test_a_corpus_stays_in_the_global_tree_through_forget_and_eviction(tmp_path):
    """`-o suffix.datastore=DIR`: the corpus's texts are in the global tree from the start, survive
    `forget` (a new pass) and are never evicted by the run's own answers."""
    from helpers.tiny import make_tokenizer

    from specbench_cli.methods.retrieval.datastore import write

    tok = make_tokenizer()
    write([[20, 21, 22, 23, 24]], tok, tmp_path / "ds", ["corpus"], index=False)
    m = SuffixDecoding(MethodContext(tokenizer=tok, budget=8), datastore=str(tmp_path / "ds"), max_cached_requests=1)
    m.setup()
    assert m.label() == "suffix(max_cached_requests=1,datastore=ds)" and m.params()["datastore_tokens"] == 5
    for answer in ([1, 2, 3, 4], [5, 6, 7, 8]):
        m.remember(answer)
    m.forget()
    m.reset([0])
    d = m.propose(_state([0, 20, 21], prompt_len=1))
    assert d.tokens == [22, 23] and m.counts["global"] == 1  # a 2-token match drafts 2 (max_spec_factor 1)
    assert m.stats()["global_requests"] == 0  # the run's answers it held; the corpus is in params


@pytest.mark.parametrize("budget", [4, 10])
def test_suffix_with_a_corpus_equals_ar_and_drafts_from_it(budget, tiny_model, tiny_tok, tiny_datastore):
    from helpers.artifacts import equals_ar_counting

    m = SuffixDecoding.create(MethodContext(tiny_model, tiny_tok, budget=budget), datastore=tiny_datastore)
    assert equals_ar_counting(m, tiny_model, tiny_tok, budget, "steps_global") > 0


def test_a_draft_never_exceeds_the_budget_or_the_answer_cap():
    m = _suffix(budget=4, max_spec_factor=8.0)
    m.reset(list(range(10)) * 3)
    ids = list(range(10)) * 3 + [0, 1, 2]
    assert len(m.propose(_state(ids, prompt_len=30, budget=4))) == 3
    assert len(m.propose(_state(ids, prompt_len=30, budget=4, remaining=2))) == 2


@pytest.mark.parametrize("fallback", ["pld", "recycling", "eagle", "eagle3", "hydra", "medusa"])
@pytest.mark.parametrize("budget", [4, 10, 30])
def test_the_hybrid_equals_ar_and_uses_both_drafters(fallback, budget, tiny_model, tiny_tok, tiny_heads,
                                                     tmp_path_factory):
    """Each step the suffix trees draft when their score beats the fallback's mean acceptance;
    a head fallback still takes the hidden states of the steps it skips (EAGLE's and Hydra's
    caches would otherwise be out of step and raise)."""
    from helpers.tiny_eagle3 import train_tiny_eagle3

    options = {"fallback": fallback}
    if fallback == "eagle3":
        options["heads"] = train_tiny_eagle3(tiny_model, tmp_path_factory.mktemp("e3") / "h")
    elif fallback not in ("pld", "recycling"):
        options["heads"] = tiny_heads[fallback]
    ctx = MethodContext(tiny_model, tiny_tok, budget=budget)
    dec = Decoder(as_target(tiny_model), {EOS})
    hybrid = SuffixDecoding.create(ctx, **options)
    ar = methods.get("ar").create(ctx)
    used = {"suffix": 0, "fallback": 0}
    for prompt in ([2, 40, 41, 42, 40, 41, 42, 40, 41], [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]):
        got = dec.generate(hybrid, prompt, 48, budget)
        assert got.output_ids == dec.generate(ar, prompt, 48, budget).output_ids
        hybrid.remember(got.output_ids)
        used["suffix"] += got.stats["steps_local"] + got.stats["steps_global"]
        used["fallback"] += got.stats["steps_fallback"]
    assert used["suffix"] > 0 and used["fallback"] > 0, used


# ----------------------------------------------------------------------------- in runs


def _run(model_dir, out, *extra):
    return ["run", "--model", str(model_dir), "--methods", "ar,suffix", "--categories", "mt_bench,qa,summarization",
            "--limit", "2", "--max-new-tokens", "24", "--output-dir", str(out), "--threads", "1", "--no-report", *extra]


def _drafting(rows):
    """What drafting did per (method, question, turn, repeat): everything but the clock."""
    return {(r["method"], r["question_id"], r["turn"], r["repeat"]):
            (r["output_ids"], r["accept_lengths"], r["draft_sizes"], r.get("method_stats")) for r in rows}


def test_every_pass_starts_empty_and_rows_record_what_the_global_tree_held(tiny_model_dir, tmp_path, capsys):
    code, _, err = cli(_run(tiny_model_dir, tmp_path, "--repeats", "2"), capsys)
    assert code == 0, err
    rows = [r for r in run_rows(only_run_dir(tmp_path)) if r["method"] == "suffix"]
    for repeat in (0, 1):
        held = [r["method_stats"]["global_requests"] for r in rows if r["repeat"] == repeat]
        assert held == list(range(len(held))) and len(held) == 8  # mt_bench: 2 turns x 2, qa and summarization: 2
    # the second pass drafts exactly as the first: it never sees the first pass's answers
    first = {k[:3]: v for k, v in _drafting(rows).items() if k[3] == 0}
    second = {k[:3]: v for k, v in _drafting(rows).items() if k[3] == 1}
    assert first == second
    assert sum(r["method_stats"]["steps_global"] for r in rows) > 0  # earlier answers were drafted from


def test_a_resumed_run_drafts_exactly_as_an_uninterrupted_one(tiny_model_dir, tmp_path, capsys):
    code, _, err = cli(_run(tiny_model_dir, tmp_path / "whole"), capsys)
    assert code == 0, err
    whole = only_run_dir(tmp_path / "whole")
    rows = run_rows(whole)
    # kill -9 after the 7th row: three of suffix's turns written, the rest to come
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut / whole.name)
    samples = cut / whole.name / "samples.jsonl"
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:7]))
    manifest = json.loads((cut / whole.name / "manifest.json").read_text())
    (cut / whole.name / "manifest.json").write_text(json.dumps({**manifest, "finished": None}))
    code, _, err = cli(["run", "--resume", str(cut / whole.name), "--no-report"], capsys)
    assert code == 0, err
    resumed = run_rows(cut / whole.name)
    assert _drafting(resumed) == _drafting(rows)
    later = [r for r in resumed[7:] if r["method"] == "suffix"]
    assert sum(r["method_stats"]["steps_global"] for r in later) > 0  # the rebuilt tree was drafted from


def test_bc_auto_calibrates_suffix(tiny_model_dir, tmp_path, capsys, isolated_cache):
    code, _, err = cli(["run", "--model", str(tiny_model_dir), "--methods", "ar,suffix@auto", "--categories", "qa",
                        "--limit", "1", "--max-new-tokens", "8", "--output-dir", str(tmp_path / "runs"),
                        "--threads", "1", "--no-report", "--auto-questions", "2", "--auto-tokens", "8",
                        "--auto-candidates", "1,4"], capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path / "runs")
    record = json.loads((run / "manifest.json").read_text())["bc_auto"]["suffix@auto"]
    assert record["chosen"] in (1, 4) and set(record["candidates"]) == {"1", "4"}
    assert {r["method"] for r in run_rows(run)} == {"ar", "suffix@auto"}


def test_a_sweep_over_suffix_options_runs_and_resumes(tmp_path, tiny_model_dir):
    from helpers.sweep import comparable_rows, sweep_subprocess, write_grid

    grid = write_grid(tmp_path, f'models = ["{tiny_model_dir}"]\nmethods = ["suffix"]\nbcs = [6]\n'
                                f'categories = ["qa", "mt_bench"]\nshard = "none"\nlimit = 1\nmax_new_tokens = 8\n'
                                f'[options.suffix]\nmax_spec_factor = 2.0\nmin_token_prob = 0.2\n')
    out = tmp_path / "sweep"
    first = sweep_subprocess(["sweep", str(grid), "-o", str(out)])
    assert first.returncode == 0, first.stderr
    rows = comparable_rows(out)
    assert {r[1] for r in rows} == {"ar", "suffix"}
    (manifest,) = (out / "jobs").glob("*/*/manifest.json")
    params = json.loads(manifest.read_text())["methods"]["suffix"]["params"]
    assert (params["max_spec_factor"], params["min_token_prob"]) == (2.0, 0.2)


def test_at_a_batch_size_every_slot_remembers_earlier_groups_never_its_own(tiny_model_dir, tmp_path, capsys):
    code, _, err = cli(_run(tiny_model_dir, tmp_path, "--repeats", "2", "--batch-size", "2"), capsys)
    assert code == 0, err
    rows = [r for r in run_rows(only_run_dir(tmp_path)) if r["method"] == "suffix"]
    assert {r["batch_size"] for r in rows} == {2} and len({r["batch_id"] for r in rows}) == 3
    for r in rows:  # a (group, turn) is decoded together: it holds every earlier group's and turn's answers
        earlier = [o for o in rows if o["repeat"] == r["repeat"] and (o["batch_id"], o["turn"]) < (r["batch_id"], r["turn"])]
        assert r["method_stats"]["global_requests"] == len(earlier), (r["question_id"], r["turn"], r["repeat"])
    first = {k[:3]: v for k, v in _drafting(rows).items() if k[3] == 0}
    second = {k[:3]: v for k, v in _drafting(rows).items() if k[3] == 1}
    assert first == second  # each pass forgets in every slot
    ar = {(r["question_id"], r["turn"], r["repeat"]): r["output_ids"]
          for r in run_rows(only_run_dir(tmp_path)) if r["method"] == "ar"}
    assert all(r["output_ids"] == ar[(r["question_id"], r["turn"], r["repeat"])] for r in rows)
