"""One drafter per sequence of a batch (run/replicas.py): copies share the target, the tokenizer
and every weight, and nothing a generation changes; a method that cannot be copied is built again."""

from __future__ import annotations

import shutil
import threading

import torch

from specbench_cli import methods
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.run.replicas import copy_drafter, replicas


def test_head_copies_share_weights_but_keep_their_own_per_prompt_vocabulary(tmp_path, tiny_model, tiny_tok,
                                                                           tiny_heads):
    from safetensors.torch import save_file

    folder = tmp_path / "eagle"
    shutil.copytree(tiny_heads["eagle"], folder)
    save_file({"ids": torch.tensor([3, 5, 9])}, str(folder / "draft_vocab.safetensors"))
    method = methods.get("eagle").create(MethodContext(tiny_model, tiny_tok, budget=8), heads=str(folder))
    twin = copy_drafter(method)
    assert twin is not None and twin is not method and twin.head is not method.head
    assert twin.ctx.target is method.ctx.target and twin.ctx.tokenizer is method.ctx.tokenizer
    assert all(a is b for a, b in zip(twin.head.parameters(), method.head.parameters()))  # no weight copied
    method.reset([2, 40, 41])
    twin.reset([2, 77])
    assert method.head.draft_ids.tolist() == [2, 3, 5, 9, 40, 41]  # the copy's prompt did not leak into it
    assert twin.head.draft_ids.tolist() == [2, 3, 5, 9, 77]
    assert method.cache is not twin.cache


def test_draft_model_copies_share_the_draft_weights_not_its_cache(tiny_model, tiny_tok, tiny_model_dir):
    method = methods.get("sps").create(MethodContext(tiny_model, tiny_tok, budget=4, draft_model=str(tiny_model_dir)))
    twin = copy_drafter(method)
    assert twin.draft is not method.draft
    assert all(a is b for a, b in zip(twin.draft.model.parameters(), method.draft.model.parameters()))
    method.reset([2, 5, 9])
    method._next_dist([2, 5, 9])  # the draft model's keys/values of one copy...
    assert method.batch is not None and twin.batch is None  # ...are not the other's


def test_state_built_in_setup_is_copied_not_shared(tiny_model, tiny_tok):
    method = methods.get("pld").create(MethodContext(tiny_model, tiny_tok, budget=6))
    copies = replicas(method, 3, fresh=lambda: None)
    assert copies[0] is method and len({id(c) for c in copies}) == 3
    copies[1].reset([2, 40, 41, 42, 40, 41])
    copies[2].reset([2, 9, 9])
    assert copies[1].index is not copies[2].index


class _Holding(methods.get("ar")):
    """A method that holds something deepcopy refuses (a lock)."""

    def setup(self):
        self.lock = threading.Lock()


def test_a_method_that_cannot_be_copied_is_planned_and_bound_again(tiny_model, tiny_tok):
    ctx = MethodContext(tiny_model, tiny_tok, budget=1)
    built = []

    def fresh():
        built.append(_Holding.create(ctx))
        return built[-1]

    copies = replicas(_Holding.create(ctx), 3, fresh)
    assert copies[1:] == built and len(built) == 2
