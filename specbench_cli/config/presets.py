"""Settings in one flag: `--preset` (a published benchmark's settings) and the quick tour of a
`specbench run` without `--tasks`. Both fill only what the user did not give."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specbench_cli.config.instance import parse_instance
from specbench_cli.errors import unknown


@dataclass(frozen=True)
class Preset:
    """Settings of a published benchmark in one flag: run options (by flat name), and per method
    a block complexity (None: the run's) and options. Anything the user gives explicitly wins."""

    summary: str
    run: dict
    methods: dict  # name -> (BC or None, {option: value})


PRESETS = {
    # Spec-Bench (hemingkx/Spec-Bench, eval.sh and evaluation/inference_*.py): Vicuna's fastchat
    # template, greedy, 1024 new tokens, float16; EAGLE-2 total_token 60, depth 5 (EAGLE counts the
    # levels after the first: our 6), top_k 10; Medusa-1 and Hydra on mc_sim_7b_63 (64 tokens); EAGLE-1 on its
    # 25-node tree when asked for with eagle.tree; Lookahead level 5, window 7, guess 7; PLD
    # max_ngram 3 with 10 tokens. docs/presets.md lists them next to the leaderboard.
    "spec-bench": Preset(
        "Spec-Bench's settings: vicuna template, 1024 new tokens, float16, per-method trees",
        run={"prompt_template": "vicuna", "max_new_tokens": 1024, "dtype": "float16", "temperature": 0.0},
        methods={"eagle": (60, {"depth": 6, "top_k": 10}), "medusa": (64, {"choices": "mc_sim_7b_63"}),
                 "hydra": (64, {"choices": "mc_sim_7b_63"}),
                 "lookahead": (None, {"N": 5, "W": 7, "G": 7}), "pld": (11, {"max_ngram": 3, "num_pred_tokens": 10})}),
}


def check_preset(value: Any) -> Any:
    if value is not None and value not in PRESETS:
        raise unknown("preset", value, tuple(PRESETS))
    return value


def apply_preset(cfg: Any, given: set[str]) -> None:
    """Fill the RunConfig `cfg` from its preset where the user gave nothing: run fields not in
    `given` (flat names of the options set explicitly), each listed method's BC (as NAME@BC,
    unless --bc or NAME@BC was given) and its options (unless given with -o)."""
    preset = PRESETS[check_preset(cfg.methods.preset)]
    for name, value in preset.run.items():
        if name not in given:
            cfg.set(name, value)
    specs = []
    for spec in cfg.methods.names:
        inst = parse_instance(spec)
        budget, options = preset.methods.get(inst.name, (None, {}))
        if inst.budget is None and budget is not None and "block_complexity" not in given:
            spec = f"{inst.name}@{budget}"
        for key, value in options.items():
            cfg.methods.options.setdefault(inst.name, {}).setdefault(key, value)
        specs.append(spec)
    cfg.methods.names = specs


# `specbench run` with no --tasks (README command 1) is a quick tour of the default suite: every
# training-free method on one `mini` question per category at 64 new tokens, a few minutes on a
# 2-core CPU; naming the suite (`--tasks mini`) runs all of it at the usual 128 tokens.
TOUR = {"limit": 1, "max_new_tokens": 64}


def apply_tour(cfg: Any, given: set[str]) -> bool:
    """Give the RunConfig `cfg` of a run without --tasks the tour's limit and length where the
    user set neither (CLI parameter names in `given`, here the options' flat names too); True
    when anything changed."""
    defaults = type(cfg)()
    changed = False
    for name, value in TOUR.items():
        if name not in given and cfg.get(name) == defaults.get(name):
            cfg.set(name, value)
            changed = True
    return changed
