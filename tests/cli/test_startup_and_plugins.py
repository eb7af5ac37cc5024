"""Options checked before the model loads, one registry (lazy, entry points), the
drafter contract's hidden states, one prompt encoding, tasks that own their categories,
old run folders still loading."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers.cli import cli

from specbench_cli import tasks
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import Structure
from specbench_cli.methods.core.method import Method, MethodContext
from specbench_cli.models.prompting import encode_chat, user_turn
from specbench_cli.store.rows import SampleRow, required_keys
from specbench_cli.store.runfolder import load_run
from specbench_cli.targets import as_target
from specbench_cli.tasks.categories import display_category

REPO = Path(__file__).resolve().parents[2]
PROMPT = [5, 9, 17, 33, 2, 64, 8]


@pytest.mark.parametrize("option,message", [
    ("pld.max_ngrm=4", "has no option 'max_ngrm'. Did you mean 'max_ngram'?"),
    ("pld.max_ngram=abc", "expects int"),
    ("lookahead.W=9", "more than block complexity 4"),
    ("sps.gamma=-1", "sps.gamma must be between 0 and 4096"),
])
def test_bad_method_option_exits_2_fast_before_any_model_loads(option, message, capsys, monkeypatch, tmp_path):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr("specbench_cli.models.load.load_model", no_model)
    method = option.split(".")[0]
    args = ["run", "--methods", method, "--block-complexity", "4", "--option", option,
            "--output-dir", str(tmp_path), "--draft-model", "unused"]
    start = time.perf_counter()
    code, _, err = cli(args, capsys)
    elapsed = time.perf_counter() - start
    assert code == 2, err
    assert message in " ".join(err.split())
    assert elapsed < 2.0, f"took {elapsed:.2f} s"
    assert not list(tmp_path.iterdir())  # no run folder either


def test_list_methods_imports_the_method_classes_but_no_torch():
    """The registry reads a method's attributes from its class; method modules reach torch
    only through `specbench_cli.lazy`, so listing them imports no torch."""
    code = ("import sys\nfrom specbench_cli.cli.main import main\nsys.argv = ['specbench', 'list', 'methods']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('IMPORTED', 'torch' in sys.modules, 'specbench_cli.methods.heads.eagle.method' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "IMPORTED False True" in out.stdout, out.stdout + out.stderr
    assert "mask-probe" in out.stdout


# A cold `specbench run` with a bad option must answer in well under 2 s. Wall time in a test
# is noise (the CI machine is shared), so the test checks the cause instead: checking options
# imports none of torch (3-6 s here), transformers or pandas (~1 s), in a fresh interpreter.
@pytest.mark.parametrize("args", [
    ["--methods", "pld", "-o", "pld.max_ngrm=4"],
    ["--methods", "lookahead", "--bc", "4", "-o", "lookahead.W=9"],
    ["--methods", "jacobi,tr-jacobi,mask-probe", "-o", "mask-probe.bogus=1"],
    ["--methods", "sps", "-o", "sps.gamma=-1", "--draft-model", "unused"],
    ["--methods", "medusa"],
    ["--methods", "eagle"],
    ["--device", "cpu:abc"],
    ["--dtype", "float8"],
], ids=lambda a: " ".join(a))
def test_a_cold_run_with_bad_input_imports_no_heavy_module(args, tmp_path):
    code = ("import sys\nfrom specbench_cli.cli.main import main\n"
            f"sys.argv = ['specbench', 'run', '--output-dir', {str(tmp_path)!r}] + {args!r}\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print('EXIT', e.code)\n"
            "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "EXIT 2" in out.stdout, out.stdout + out.stderr
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr  # one line


def test_registry_rejects_a_target_that_is_not_a_method(monkeypatch, capsys):
    from specbench_cli import methods

    monkeypatch.setitem(methods.REGISTRY, "notamethod", "specbench_cli.store.rows:SampleRow")
    code, _, err = cli(["run", "--methods", "notamethod"], capsys)
    assert code == 2 and "is not a subclass of specbench_cli.methods.core.method.Method" in " ".join(err.split())


PLUGIN = '''
from specbench_cli.decoding.drafter import Structure
from specbench_cli.decoding.draft import Draft
from specbench_cli.methods.core.method import Method
from specbench_cli.tasks.base import Question, Task
from specbench_cli.targets import as_target


class Repeat(Method):
    """Drafts the root token again (a chain of one): lossless, since the target verifies it."""
    name = "plugin-repeat"
    summary = "test plugin"
    structure = Structure.CHAIN

    def propose(self, state):
        return Draft.chain(state.ids[-1:] if state.budget > 1 else [])


class Two(Task):
    name = "plugin-two"
    summary = "two questions"
    categories = {"coding": "coding"}

    @classmethod
    def load(cls, questions_path=None):
        return [Question(task=cls.name, id=str(i), category="coding", turns=[t])
                for i, t in enumerate(["hello there", "write code"])]
'''


def test_entry_point_plugin_adds_a_method_and_a_task(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A real entry-point discovery: a .dist-info with entry_points.txt on sys.path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sb_plugin_demo.py").write_text(PLUGIN)
    info = site / "sb_plugin_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sb-plugin-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[specbench.methods]\nplugin-repeat = sb_plugin_demo:Repeat\n\n"
                                          "[specbench.tasks]\nplugin-two = sb_plugin_demo:Two\n")
    monkeypatch.syspath_prepend(str(site))
    from specbench_cli import methods
    from specbench_cli import tasks as task_registry
    from specbench_cli.tasks import categories

    for reg in (methods._REGISTRY, task_registry._REGISTRY):
        monkeypatch.setattr(reg, "entries", dict(reg.entries))
        monkeypatch.setattr(reg, "_discovered", False)
    categories._tasks.cache_clear()
    try:
        assert "plugin-repeat" in methods.names() and "plugin-two" in task_registry.names()
        out_dir = tmp_path / "runs"
        args = ["run", "--model", str(tiny_model_dir), "--methods", "ar,plugin-repeat", "--tasks", "plugin-two",
                "--max-new-tokens", "8", "--output-dir", str(out_dir), "--threads", "1", "--no-report"]
        code, _, err = cli(args, capsys)
        assert code == 0, err
        run = load_run(next(out_dir.iterdir()))
        rows = [r for r in run.rows if r["method"] == "plugin-repeat"]
        assert len(rows) == 2 and all(r["ar_match"] for r in rows) and rows[0]["structure"] == "chain"
        assert all(r["category"] == "coding" for r in run.rows)
    finally:
        categories._tasks.cache_clear()


class Probe(Method):
    """Records the hidden states the engine hands over; drafts the greedy token of the last one."""

    name = "probe"
    structure = Structure.CHAIN
    needs_hidden_states = True

    def reset(self, prompt_ids):
        self.seen: list[torch.Tensor] = []

    def propose(self, state):
        assert state.hidden is not None
        self.seen.append(state.hidden)
        head = self.ctx.target.output_projection()
        return Draft.chain([int(head(state.hidden[-1]).argmax())][: state.budget - 1])


def test_hidden_states_of_the_accepted_path_match_a_full_forward_and_tokens_equal_ar(tiny_model, tiny_tok):
    ctx = MethodContext(tiny_model, tiny_tok, budget=4)
    dec = Decoder(as_target(tiny_model), set())
    ar = dec.generate(Method.create(ctx), PROMPT, 20, 4)
    probe = Probe.create(ctx)
    got = dec.generate(probe, PROMPT, 20, 4)
    assert got.output_ids == ar.output_ids
    # the hidden rows handed over, concatenated, are the states of prompt + accepted tokens
    handed = torch.cat(probe.seen)
    seq = torch.tensor([PROMPT + got.output_ids[:-1]])
    full = tiny_model.get_decoder()(input_ids=seq).last_hidden_state[0]
    torch.testing.assert_close(handed, full[: len(handed)], rtol=1e-4, atol=1e-5)
    assert probe.seen[0].shape[0] == len(PROMPT)


def test_benchmark_and_distillation_encode_a_conversation_identically(tiny_tok):
    from specbench_cli.training.draft_model.distill_data import chat_prompt

    class Templated:
        """A chat-template tokenizer stand-in over the tiny one."""
        chat_template = "x"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert tokenize and add_generation_prompt
            return tiny_tok("<u>" + messages[-1]["content"] + "<a>")["input_ids"]

    from specbench_cli.models.prompting import ChatPrompter  # what the runner encodes prompts with

    for tok in (tiny_tok, Templated()):
        text = "Explain the sea in one line."
        ids = chat_prompt(tok, text)
        assert ids == ChatPrompter(tok)(user_turn(text)) == encode_chat(tok, [{"role": "user", "content": text}])
        assert len(ids) > 3


def test_a_user_jsonl_category_is_reported_as_written_and_spec_bench_folds_mt_bench(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text('{"question_id": 1, "category": "cooking", "turns": ["x"]}\n')
    assert [x.category for x in tasks.get("jsonl").load(str(q))] == ["cooking"]
    assert display_category("cooking") == "cooking"
    assert tasks.get("spec_bench").reported("writing") == "mt_bench"
    assert display_category("mt_bench") == "MT-bench"


def test_sample_row_round_trips_and_old_reference_runs_still_load():
    row = SampleRow(method="pld", method_label="pld", category="qa", question_id="1", turn=0, repeat=0,
                    status="ok", structure="chain")
    assert SampleRow.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    for manifest in (REPO / "results" / "reference").glob("**/manifest.json"):
        if json.loads(manifest.read_text()).get("kind") == "load":  # a load run's folder: report/load.py reads it
            continue
        run = load_run(manifest.parent)
        assert run.rows and all(k in run.rows[0] for k in required_keys("ok"))


def test_options_annotated_with_real_types_are_coerced_too():
    """A plugin module without `from __future__ import annotations` has typing objects, not strings."""
    import dataclasses
    from typing import Optional

    from specbench_cli.errors import UsageError
    from specbench_cli.options import parse_options

    opts_cls = dataclasses.make_dataclass("O", [("depth", Optional[int], None), ("rate", float, 0.5)])
    assert parse_options("m", opts_cls, {"depth": "3", "rate": "0.25"}) == opts_cls(depth=3, rate=0.25)
    with pytest.raises(UsageError, match="expects int"):
        parse_options("m", opts_cls, {"depth": "x"})


def test_a_run_without_tasks_is_the_quick_tour_and_naming_the_suite_runs_all_of_it(tmp_path, capsys, tiny_model_dir):
    """README command 1 (`specbench run`) must finish in minutes on a 2-core CPU: one mini question
    per category at 64 tokens; `--tasks mini` is the whole suite at 128, and explicit flags win."""
    import json

    from helpers.cli import cli, only_run_dir

    base = ["run", "--model", str(tiny_model_dir), "--methods", "ar", "--categories", "qa", "--threads", "1",
            "--no-report"]
    cases = [([], 1, 64, True), (["--tasks", "mini"], None, 128, False), (["--max-new-tokens", "8"], 1, 8, True),
             (["--limit", "2"], 2, 64, True)]
    for i, (extra, limit, tokens, note) in enumerate(cases):
        out = tmp_path / f"runs{i}"
        code, _, err = cli([*base, "--output-dir", str(out), *extra], capsys)
        assert code == 0, err
        config = json.loads((only_run_dir(out) / "manifest.json").read_text())["config"]
        assert (config["limit"], config["max_new_tokens"]) == (limit, tokens), extra
        assert ("quick tour" in err) == note
