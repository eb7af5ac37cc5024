"""A sweep resuming a half-done job gives `run --resume` the settings a run folder may not choose
(`--engine-bin`, `--engine-url`, an engine method's `args`) from its own grid's arguments:
`run --resume` takes them only from the command line."""

from __future__ import annotations

from specbench_cli.run.resume import command_line_only_args


def test_a_resumed_job_repeats_only_the_command_line_only_settings():
    args = ["run", "--model", "m", "--methods", "ar,llama.cpp:ar", "--engine-bin", "llama.cpp=/opt/llama",
            "--option", "llama.cpp:ar.args=--spec-type ngram-mod", "--option", "pld.max_ngram=3",
            "-o", "vllm:ngram.args=a=b", "--engine-url", "vllm=http://127.0.0.1:8000", "--limit", "2"]
    assert command_line_only_args(args) == [
        "--engine-bin", "llama.cpp=/opt/llama", "--option", "llama.cpp:ar.args=--spec-type ngram-mod",
        "-o", "vllm:ngram.args=a=b", "--engine-url", "vllm=http://127.0.0.1:8000"]


def test_a_job_without_engines_repeats_nothing():
    assert command_line_only_args(["run", "--methods", "pld", "--option", "pld.max_ngram=3", "--bc", "8"]) == []
