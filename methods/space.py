"""SPACE: smart parallel auto-correct decoding ("Generation Meets Verification: Accelerating Large
Language Model Inference with Smart Parallel Auto-Correct Decoding", Yi, Lin, Li, Ning, Yu, Xiao,
ACL Findings 2024, arXiv 2402.11809).

The target itself is fine-tuned (`specbench train space`, training/space/) so that `k` copies of a
new [MASK] token placed after a text predict the `k` tokens that follow the next one, while its
ordinary next-token predictions stay those of an autoregressive model. Decoding verifies and
drafts in the same forward ("auto-correct"):

    root, c_1 .. c_k (the previous step's candidates, verified now),
    k masks after the root, k masks after c_1, ..., k masks after c_k

as one tree: the candidates are a chain below the root and each of the k + 1 chain nodes carries
its own chain of k mask nodes (input-only: `acceptable=False`; real token ids, the mask token's
own embedding). Whatever prefix `c_1 .. c_a` the target accepts, the mask group hanging from its
last node saw exactly the accepted text: mask j sits at position root + a + j and its logits
guess the token at root + a + j + 1, i.e. the j-th token after the bonus token, so that group's
argmaxes are the next step's candidates. This is the layout of the paper's Figure 1 (k + 1 mask
groups and k candidates); block complexity counts every node: `1 + k + k (k + 1) = (k + 1)^2 <= BC`.

The mask id comes from, in order: option `mask_id`; the model's config.json `space_mask_id`
(written by `specbench train space`); the tokenizer's mask token (`mask_token`, or an added token
named [MASK] / <mask>). The published checkpoints record it nowhere (their evaluation script takes
`--mask_id`), so for them pass `-o space.mask_id=ID`. A target without one is refused with one line
(exit 2): at planning when `--model` is a local folder, else when the model has loaded.

Lossless against AR of the same (fine-tuned) model: candidates are verified by the engine's rule
(greedy: equality with the target's argmax; sampling: the engine's exact rule for drafts without a
drafter distribution), so the output is the target's own.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from specbench_cli.decoding.draft import Draft
from specbench_cli.decoding.drafter import DecodeState, Structure, VerifyResult
from specbench_cli.errors import UsageError
from specbench_cli.methods.core.method import Method
from specbench_cli.names import MAX_BUDGET
from specbench_cli.options import opt

CONFIG_KEY = "space_mask_id"        # config.json key `specbench train space` writes
CONFIG_NUM_KEY = "space_mask_num"   # masks per group it trained with
MASK_NAMES = ("[MASK]", "<mask>")   # added-token names taken as the mask token
MAX_ID = 2 ** 31 - 1


@dataclass
class SpaceOptions:
    mask_id: Optional[int] = opt(None, lo=0, hi=MAX_ID)  # None: config.json space_mask_id, else the tokenizer's mask token
    k: Optional[int] = opt(None, lo=0, hi=MAX_BUDGET)    # candidates per step = masks per group; None: isqrt(BC) - 1


def candidates_for(budget: int, requested: Optional[int]) -> int:
    """k at block complexity `budget`: the largest with (k + 1)^2 <= budget (or the requested one)."""
    fit = math.isqrt(max(budget, 1)) - 1
    return fit if requested is None else requested


def mask_id_in_folder(folder: Path) -> Optional[int]:
    """The mask id a model folder declares, read from its files without loading anything:
    config.json `space_mask_id`, tokenizer_config.json's `mask_token` (or an added token named
    [MASK] / <mask>), tokenizer.json's added tokens. None when it declares none."""
    def read(name: str) -> dict:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    value = read("config.json").get(CONFIG_KEY)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    tc = read("tokenizer_config.json")
    mask = tc.get("mask_token")
    if isinstance(mask, dict):
        mask = mask.get("content")
    names = {mask} if isinstance(mask, str) else set(MASK_NAMES)
    for key, entry in (tc.get("added_tokens_decoder") or {}).items():
        if isinstance(entry, dict) and entry.get("content") in names and str(key).isdigit():
            return int(key)
    for entry in read("tokenizer.json").get("added_tokens") or []:
        if isinstance(entry, dict) and entry.get("content") in names and isinstance(entry.get("id"), int):
            return entry["id"]
    return None


def mask_id_of_tokenizer(tokenizer: Any) -> Optional[int]:
    """The tokenizer's mask token id (its `mask_token`, else an added [MASK] / <mask>), or None."""
    if tokenizer is None:
        return None
    tid = getattr(tokenizer, "mask_token_id", None) if getattr(tokenizer, "mask_token", None) else None
    if isinstance(tid, int):
        return tid
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for name in MASK_NAMES:
        if name in vocab:
            return int(vocab[name])
    return None


def missing_mask_line(where: str) -> str:
    return (f"method space needs a target fine-tuned with a mask token, and {where} declares none "
            f"(no config.json {CONFIG_KEY}, no [MASK] token): train one with `specbench train space` "
            f"or name the id with -o space.mask_id=ID")


class Space(Method):
    name = "space"
    summary = "SPACE: target fine-tuned with [MASK] tokens; verify and draft in one forward (auto-correct)"
    lossless = True
    needs_training = True
    structure = Structure.TREE
    requires = ("mask_token",)   # a target fine-tuned with a mask token (its id: option mask_id or the model's files)
    Options = SpaceOptions

    def plan(self) -> None:
        o = self.opts
        fit = math.isqrt(max(self.ctx.budget, 1)) - 1
        if o.k is not None and o.k > fit:
            raise UsageError(f"space k must be at most {fit} at block complexity {self.ctx.budget} "
                             f"((k + 1)^2 <= BC: k candidates and k + 1 groups of k masks), got {o.k}")
        self.k = candidates_for(self.ctx.budget, o.k)
        self.mask_id: Optional[int] = o.mask_id
        self.trained_k: Optional[int] = None
        ref = self.ctx.target_ref
        if self.mask_id is None and ref and Path(str(ref)).expanduser().is_dir():
            folder = Path(str(ref)).expanduser()
            self.mask_id = mask_id_in_folder(folder)
            if self.mask_id is None:
                raise UsageError(missing_mask_line(f"model folder {folder}"))

    def setup(self) -> None:
        from specbench_cli.decoding.target import MissingCapability

        target = self.ctx.target
        try:
            config = target.config
        except MissingCapability:  # a target without a config (llama.cpp): the option or the tokenizer says
            config = None
        if self.mask_id is None:
            value = getattr(config, CONFIG_KEY, None) if config is not None else None
            self.mask_id = value if isinstance(value, int) else mask_id_of_tokenizer(self.ctx.tokenizer)
        if self.mask_id is None:
            raise UsageError(missing_mask_line("the target"))
        trained = getattr(config, CONFIG_NUM_KEY, None) if config is not None else None
        self.trained_k = trained if isinstance(trained, int) else None
        vocab = target.vocab_size
        if not 0 <= self.mask_id < vocab:
            raise UsageError(f"space mask id {self.mask_id} is outside the target's vocabulary (size {vocab})")

    def params(self) -> dict:
        return {"structure": self.structure.value, "mask_id": self.mask_id, "k": self.k,
                "masks": self.k * (self.k + 1), "trained_k": self.trained_k}

    def label(self) -> str:
        return "space" if self.opts.k is None else f"space(k={self.opts.k})"

    # -- drafter contract ---------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.cands: list[int] = []            # the next step's candidates (tokens after the next root)
        self.groups: list[list[int]] = []     # groups[d]: node indices of the masks after chain depth d

    def propose(self, state: DecodeState) -> Draft:
        self.groups = []
        k = min(self.k, math.isqrt(max(state.budget, 1)) - 1)
        if k <= 0:
            return Draft()
        chain = self.cands[:max(0, min(k, state.remaining - 1))]
        tokens = list(chain)
        parents = list(range(-1, len(chain) - 1))
        acceptable = [True] * len(chain)
        for depth in range(len(chain) + 1):   # the root's group, then one after each candidate
            group = []
            for j in range(k):
                group.append(len(tokens))
                tokens.append(self.mask_id)
                parents.append(group[-2] if j else depth - 1)
                acceptable.append(False)
            self.groups.append(group)
        return Draft(tokens=tokens, parents=parents, acceptable=acceptable)

    def observe(self, result: VerifyResult) -> None:
        if not self.groups:
            self.cands = []
            return
        group = self.groups[len(result.accepted)]   # the masks after the last accepted node
        rows = [node + 1 for node in group]
        self.cands = result.logits[rows].argmax(-1).tolist()
