"""Prompt templates: the published formats, the option's checks, and the record in results."""

from __future__ import annotations

import pytest

from specbench_cli.config import BudgetSection, DecodingSection, MethodsSection, ModelSection, RunConfig
from specbench_cli.errors import UsageError
from specbench_cli.models.templates import RENDER, check_template, encode

CONVERSATION = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "bye"}]


def test_vicuna_is_fastchats_vicuna_v1_1_as_spec_bench_formats_it():
    system = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
              "helpful, detailed, and polite answers to the user's questions.")
    assert RENDER["vicuna"](CONVERSATION[:1]) == f"{system} USER: hi ASSISTANT:"
    assert RENDER["vicuna"](CONVERSATION) == f"{system} USER: hi ASSISTANT: hello</s>USER: bye ASSISTANT:"


@pytest.mark.parametrize("name, text", [
    ("llama-2", "[INST] hi [/INST] hello </s><s>[INST] bye [/INST]"),
    ("llama-3", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
                "\n\nhello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nbye<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("chatml", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nbye"
               "<|im_end|>\n<|im_start|>assistant\n"),
    ("none", "hi\n\nhello\n\nbye\n\n"),
])
def test_named_templates_render_their_formats(name, text):
    assert RENDER[name](CONVERSATION) == text


def test_auto_uses_the_chat_template_and_jinja_files_render_through_transformers(tiny_tok, tmp_path):
    assert encode(tiny_tok, CONVERSATION, "auto") == list(
        tiny_tok.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=True)["input_ids"])
    jinja = tmp_path / "t.jinja"
    jinja.write_text("{% for m in messages %}{{ m['content'] }} {% endfor %}")
    assert encode(tiny_tok, CONVERSATION, str(jinja)) == tiny_tok("hi hello bye ", add_special_tokens=False)["input_ids"]
    assert encode(tiny_tok, CONVERSATION, "none") == tiny_tok("hi\n\nhello\n\nbye\n\n")["input_ids"]


def test_bad_templates_are_usage_errors(tmp_path):
    for bad in ("vicuna2", 3, str(tmp_path / "missing.jinja")):
        with pytest.raises(UsageError, match="--prompt-template"):
            check_template(bad)
    latin = tmp_path / "l.jinja"
    latin.write_bytes(b"caf\xe9")
    with pytest.raises(UsageError, match="UTF-8"):
        check_template(str(latin))


# A chat template of the kind tokenizers ship (ChatML with a default system turn, loop controls,
# the generation prompt): it must pass the check unchanged.
CHATML = """{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>' + '\n' }}{% endfor %}
{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"""


def test_a_real_chat_template_passes_the_check_and_renders_as_checked(tiny_tok, tmp_path):
    jinja = tmp_path / "chatml.jinja"
    jinja.write_text(CHATML)
    assert check_template(str(jinja)) == str(jinja)
    generation = tmp_path / "generation.jinja"  # transformers' {% generation %} tag parses too
    generation.write_text("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                          "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
    assert check_template(str(generation)) == str(generation)
    assert encode(tiny_tok, CONVERSATION, str(jinja))


def test_a_template_that_renders_forever_is_stopped_at_the_time_cap(tmp_path, monkeypatch):
    import time

    import specbench_cli.models.templates as templates

    monkeypatch.setattr(templates, "RENDER_SECONDS", 1.0)
    slow = tmp_path / "slow.jinja"
    slow.write_text("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x")
    start = time.monotonic()
    with pytest.raises(UsageError, match="rendering a sample conversation took more than 1 s"):
        check_template(str(slow))
    assert time.monotonic() - start < 10


def test_a_template_that_needs_too_much_memory_is_stopped(tmp_path, monkeypatch):
    import specbench_cli.models.templates as templates

    monkeypatch.setattr(templates, "RENDER_MEMORY_MB", 256)
    greedy = tmp_path / "greedy.jinja"  # 20 x 20 MB strings kept alive, each under the repetition cap
    greedy.write_text("{% set ns = namespace(keep=[]) %}{% for i in range(20) %}"
                      "{% set ns.keep = ns.keep + [(i|string) * 1 ~ ('%20000000s' % 'x')] %}{% endfor %}x")
    with pytest.raises(UsageError, match="needs more than 256 MB"):
        check_template(str(greedy))


def test_the_template_check_needs_no_torch_or_transformers(tmp_path):
    """The check runs with the option checks, before torch is imported: in a fresh process it
    imports neither torch nor transformers (the render is a child process with jinja2 alone)."""
    import subprocess
    import sys

    jinja = tmp_path / "t.jinja"
    jinja.write_text(CHATML)
    code = ("import sys\nfrom specbench_cli.models.templates import check_template\n"
            f"check_template({str(jinja)!r})\nprint(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_an_empty_prompt_is_refused_at_encode_time_too(tiny_tok):
    class Empty:
        chat_template = None

        def __call__(self, text):
            return {"input_ids": []}

    with pytest.raises(UsageError, match="renders no tokens"):
        encode(Empty(), CONVERSATION, "none")


def test_the_run_config_records_and_checks_it():
    cfg = RunConfig(model=ModelSection(prompt_template="vicuna"))
    cfg.validate()
    with pytest.raises(UsageError):
        RunConfig(model=ModelSection(prompt_template="alpaca")).validate()


def test_a_run_records_the_template_and_resume_refuses_another(tiny_model_dir, tmp_path, capsys):
    import json

    from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args

    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path, "--prompt-template", "vicuna"), capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path)
    assert json.loads((run / "manifest.json").read_text())["config"]["prompt_template"] == "vicuna"
    vicuna_prompt = run_rows(run)[0]["prompt_tokens"]
    code, _, err = cli(["run", "--resume", str(run), "--prompt-template", "chatml"], capsys)
    assert code == 2 and "prompt_template" in err.replace("-", "_")
    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path / "b"), capsys)
    assert code == 0 and run_rows(only_run_dir(tmp_path / "b"))[0]["prompt_tokens"] != vicuna_prompt


# --- presets ------------------------------------------------------------------------------------

def test_the_spec_bench_preset_fills_what_was_not_given():
    from specbench_cli.config import apply_preset

    cfg = RunConfig(methods=MethodsSection(preset="spec-bench", names=["ar", "pld", "eagle", "lookahead@8"],
                                           options={"eagle": {"depth": 4}}),
                    decoding=DecodingSection(max_new_tokens=64))
    apply_preset(cfg, given={"max_new_tokens", "methods", "method_options", "preset"})
    assert cfg.model.prompt_template == "vicuna" and cfg.model.dtype == "float16"
    assert cfg.decoding.max_new_tokens == 64
    assert cfg.methods.names == ["ar", "pld@11", "eagle@60", "lookahead@8"]
    assert cfg.methods.options["eagle"] == {"depth": 4, "top_k": 10}  # the explicit depth wins
    assert cfg.methods.options["lookahead"] == {"N": 5, "W": 7, "G": 7}
    cfg.validate()


def test_an_explicit_bc_keeps_every_method_at_it():
    from specbench_cli.config import apply_preset

    cfg = RunConfig(methods=MethodsSection(preset="spec-bench", names=["ar", "pld"]),
                    budget=BudgetSection(block_complexity=6))
    apply_preset(cfg, given={"methods", "block_complexity", "preset"})
    assert cfg.methods.names == ["ar", "pld"] and cfg.methods.options["pld"]["num_pred_tokens"] == 10


def test_the_preset_reaches_the_manifest_and_explicit_flags_win(tiny_model_dir, tmp_path, capsys):
    import json

    from helpers.cli import cli, only_run_dir, run_rows, tiny_run_args

    code, _, err = cli(tiny_run_args(tiny_model_dir, tmp_path, "--preset", "spec-bench", "--dtype", "float32"), capsys)
    assert code == 0, err
    run = only_run_dir(tmp_path)
    config = json.loads((run / "manifest.json").read_text())["config"]
    assert config["preset"] == "spec-bench" and config["prompt_template"] == "vicuna"
    assert config["dtype"] == "float32" and config["max_new_tokens"] == 8  # given on the command line
    assert {r["method"] for r in run_rows(run)} == {"ar", "pld@11"}
    code, _, err = cli(["run", "--preset", "leaderboard"], capsys)
    assert code == 2 and "unknown preset 'leaderboard'" in err


# --- training uses the same prompts -------------------------------------------------------------

def _rows(template=None, n=3):
    rows = [{"id": f"r{i}", "instruction": f"say {i}", "response": "ok", "target": "tiny", "finished": True}
            for i in range(n)]
    if template:
        for r in rows:
            r["prompt_template"] = template
    return rows


def test_training_examples_start_with_the_prompt_the_benchmark_sends(tiny_tok, tiny_model):
    from specbench_cli.models.prompting import ChatPrompter, user_turn
    from specbench_cli.training.draft_model.finetune import build_examples

    for template in ("auto", "vicuna", "none"):
        example = build_examples(_rows(template, 1), tiny_tok, tiny_model)[0]
        prompt = ChatPrompter(tiny_tok, template)(user_turn("say 0"))
        assert example.input_ids[:len(prompt)] == prompt and example.start == len(prompt) - 1
    # rows from before the field are auto
    assert build_examples(_rows(None, 1), tiny_tok, tiny_model)[0].input_ids == \
        build_examples(_rows("auto", 1), tiny_tok, tiny_model)[0].input_ids


def test_training_data_must_have_one_template_matching_the_flag(tmp_path):
    from specbench_cli.training.draft_model.finetune import check_distill_rows

    assert check_distill_rows(_rows("vicuna"), tmp_path / "d.jsonl") == "vicuna"
    assert check_distill_rows(_rows(None), tmp_path / "d.jsonl", "auto") == "auto"
    with pytest.raises(UsageError, match="mixes prompt templates"):
        check_distill_rows(_rows("vicuna") + _rows("chatml"), tmp_path / "d.jsonl")
    with pytest.raises(UsageError, match="generated with --prompt-template vicuna, not chatml"):
        check_distill_rows(_rows("vicuna"), tmp_path / "d.jsonl", "chatml")


def test_distill_data_records_the_template_and_a_resume_keeps_it(tiny_tok, tiny_model, tmp_path):
    import json

    from specbench_cli.training.draft_model.distill_data import generate_distill_data

    seeds = [{"id": "s1", "category": "", "instruction": "say hi"}]
    out = tmp_path / "d.jsonl"
    generate_distill_data(tiny_model, tiny_tok, seeds, out, "tiny", [0.0], max_new_tokens=3, template="vicuna")
    assert json.loads(out.read_text().splitlines()[0])["prompt_template"] == "vicuna"
    with pytest.raises(UsageError, match="not chatml"):
        generate_distill_data(tiny_model, tiny_tok, seeds, out, "tiny", [0.0], max_new_tokens=3, template="chatml")


@pytest.mark.parametrize("command", [
    ["train", "heads", "--out", "{tmp}/h"],
    ["train", "drafter", "finetune", "--drafter", "{tmp}/nowhere", "--output", "{tmp}/f"],
    ["train", "sft", "--output", "{tmp}/s"],
    ["train", "msn", "--output", "{tmp}/m"],
])
def test_training_commands_refuse_data_made_with_another_template(command, tmp_path, capsys):
    import json

    from helpers.cli import cli

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows("vicuna")))
    args = [a.format(tmp=tmp_path) for a in command] + ["--data", str(data), "--prompt-template", "chatml"]
    code, _, err = cli(args, capsys)
    assert code == 2 and "not chatml" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = cli(args[:-1] + ["alpaca"], capsys)
    assert code == 2 and "--prompt-template" in err, err
