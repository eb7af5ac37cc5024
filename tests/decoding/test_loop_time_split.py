"""The decoding loop's per-step time split: every part recorded per step and per generation,
consistent with the older fields (no timing assertions: speed belongs in benchmarks/)."""

from __future__ import annotations

import math

from helpers.tiny import EOS

from specbench_cli.decoding.decoder import Decoder, deepest
from specbench_cli.decoding.draft import Draft
from specbench_cli.methods.ar import AutoRegressive
from specbench_cli.methods.core.method import Method, MethodContext
from specbench_cli.store.rows import PARTS
from specbench_cli.targets import as_target

PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14]


class Fives(Method):
    name = "fives"

    def propose(self, state):
        return Draft.chain([5] * min(3, state.budget - 1))


def test_every_part_is_recorded_per_step_and_summed(tiny_model, tiny_tok):
    dec = Decoder(as_target(tiny_model), {EOS})
    assert dec.split  # on a CPU the split costs nothing and is always on
    g = dec.generate(Fives(MethodContext(tiny_model, tiny_tok, budget=4)), PROMPT, 12, 4)
    for part in PARTS:
        steps = getattr(g, f"step_{part}_ms")
        assert len(steps) == g.steps and all(v >= 0 for v in steps)
        assert math.isclose(sum(steps), 1000 * getattr(g, f"{part}_time"), abs_tol=1e-3 * g.steps + 1e-6)
    # the older fields keep their meaning: drafting = propose + observe, verify = forward + accept
    assert math.isclose(g.draft_time, g.propose_time + g.observe_time, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(g.verify_time, g.forward_time + g.accept_time, rel_tol=1e-9, abs_tol=1e-12)
    assert g.commit_time <= g.overhead_time + 1e-12
    assert g.propose_time + g.forward_time + g.accept_time + g.commit_time + g.observe_time <= g.wall_time
    assert g.draft_depths == [3] * g.steps


def test_ar_steps_have_no_draft_depth(tiny_model, tiny_tok):
    g = Decoder(as_target(tiny_model), {EOS}).generate(AutoRegressive(MethodContext(tiny_model, tiny_tok, budget=1)),
                                            PROMPT, 8, 1)
    assert g.draft_depths == [0] * g.steps and len(g.step_forward_ms) == g.steps


def test_deepest_acceptable_node():
    assert deepest(Draft()) == 0
    assert deepest(Draft.chain([4, 5, 6])) == 3
    tree = Draft(tokens=[1, 2, 3, 4, 5], parents=[-1, -1, 0, 2, 1])
    assert deepest(tree) == 3
    # lookahead-style input-only nodes never count
    assert deepest(Draft(tokens=[1, 2, 3, 4], parents=[-1, 0, 1, -1], acceptable=[True, False, False, True])) == 1
    assert deepest(Draft(tokens=[1, 2], parents=[-1, 0], acceptable=[False, False])) == 0


def test_the_split_on_cuda_is_asked_for():
    """On CUDA the parts need a device sync each: off unless `time_steps` asks (no extra sync per
    step otherwise); a CPU splits always and never syncs. Decided from the target's device alone,
    so this runs without a GPU."""
    import torch

    from specbench_cli.decoding.target import Target

    class OnCuda(Target):
        device = torch.device("cuda")

    class OnCpu(Target):
        device = torch.device("cpu")

    plain, asked = Decoder(as_target(OnCuda()), {EOS}), Decoder(as_target(OnCuda()), {EOS}, time_steps=True)
    assert not plain.split and not plain._part_sync
    assert asked.split and asked._part_sync
    cpu = Decoder(as_target(OnCpu()), {EOS}, time_steps=True)
    assert cpu.split and not cpu._part_sync
