"""Head kinds: every kind of draft head (Medusa, EAGLE, EAGLE-3, Hydra, DFlash) declared once.

Each built-in kind is one package, methods/heads/<kind>/ (its docstring lists its modules): its
declaration `KIND` (`kind.py`), the method that runs it (`method.py`), its head module
(`model.py`; Medusa's and EAGLE's heads are in the shared methods/heads/model.py, which the
other heads build on), the importers of its published layouts (`importer*.py`) and, where the
kind has training code of its own, that code (`training.py`). Its trainer hooks stay in
specbench_cli/training/heads/ (`hooks.py` for Medusa, EAGLE and Hydra, `<kind>.py` for EAGLE-3
and DFlash): they use the trainer's batches, losses and `TrainerHooks`, and code under methods/
imports nothing of `specbench_cli.training` (a layer above it, pyproject.toml). The pieces every
kind shares stay in methods/heads/ (common.py, model.py, checkpoint.py, kv.py, draft_trees.py,
importers/common.py).

A kind's declaration, a `HeadKind` (below), says: the file its weights are stored in, how a
heads folder is recognised as this kind and its config.json checked, how the head module is
built from the config, how it is checked against the target (before it loads, from the target's
header; once loaded, from its weights), its label, the importers of its published layouts, and
its trainer hooks (`specbench train heads`). `REGISTRY` below registers each built-in kind with
the method that runs it (the head-kind `Registry` of specbench_cli/registry.py adds the kinds of
other packages), and everything that varies by kind reads it: the heads folders
(methods/heads/checkpoint.py), the head methods' `HeadsMethod` (methods/heads/common.py),
`specbench heads import` (methods/heads/importers/), `specbench train heads`
(training/heads/train.py), the method registry (methods/__init__.py) and `HEAD_METHODS`.

A new head kind: its package with its head module, its `KIND`, its method (a `HeadsMethod`
subclass with `kind = NAME`) and its importer(s), its trainer hooks, and one entry in
`REGISTRY` (docs/adding-a-method.md, "A new head kind"); a package outside this repository
names its `KIND` in the entry-point group `specbench.head_kinds` and its method, under the same
name, in `specbench.methods`. Nothing here imports torch: `HEAD_METHODS` and the registry are
read before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from specbench_cli.registry import Registry


@dataclass(frozen=True)
class HeadKind:
    name: str  # the kind (config.json's "specbench"."kind"), also the method that runs it
    weights: str  # the weight file of a heads folder (safetensors)
    claims: Callable[[Path, dict], bool]  # (folder, config.json) -> does the folder hold this kind?
    check_config: Callable[[dict, Path], None]  # config.json's fields typed; UsageError naming the file
    build: Callable[[dict, dict, Path, Any], Any]  # (config, tensor header {key: (dtype, shape)}, weights, target config | None) -> the head module
    fit: Callable[[Any, Any, Path], tuple[int, Optional[int], bool]]  # (loaded head, Target, folder) -> (hidden, vocab | None: the target's, own vocabulary?)
    header_sizes: Callable[[dict], list[tuple[str, str]]]  # config keys checked against the target's header before it loads: (key, "hidden" | "vocab")
    shape: Callable[[Any, dict], str]  # "H=3,K=1" from the loaded head (None before) and the config
    train_flags: str  # the shape flags of `specbench train heads --kind NAME` in hints
    trainer: str  # "module:ATTR" of its `training.heads.hooks.TrainerHooks`
    importers: tuple[str, ...] = ()  # modules whose IMPORTER converts a published layout into this kind


class Registration(NamedTuple):
    kind: str  # "module:ATTR" of the HeadKind
    method: str  # "module:Class" of the method that runs it


REGISTRY: dict[str, Registration] = {
    "medusa": Registration("specbench_cli.methods.heads.medusa.kind:KIND",
                           "specbench_cli.methods.heads.medusa.method:Medusa"),
    "eagle": Registration("specbench_cli.methods.heads.eagle.kind:KIND",
                          "specbench_cli.methods.heads.eagle.method:Eagle"),
    "eagle3": Registration("specbench_cli.methods.heads.eagle3.kind:KIND",
                           "specbench_cli.methods.heads.eagle3.method:Eagle3"),
    "hydra": Registration("specbench_cli.methods.heads.hydra.kind:KIND",
                          "specbench_cli.methods.heads.hydra.method:Hydra"),
    "dflash": Registration("specbench_cli.methods.heads.dflash.kind:KIND",
                           "specbench_cli.methods.heads.dflash.method:DFlash"),
}

HEAD_METHODS: tuple[str, ...] = tuple(REGISTRY)  # the methods that draft from trained heads, one per built-in kind

_REGISTRY = Registry("head kind", "specbench.head_kinds", "specbench_cli.methods.heads.kinds:HeadKind",
                     {name: registration.kind for name, registration in REGISTRY.items()}, instances=True)
DESCRIBED = {"weights": "", "train_flags": ""}

names = _REGISTRY.names  # the built-in kinds, then those of other packages
register = _REGISTRY.register


def get(name: str) -> HeadKind:
    """The declaration of kind `name`; UsageError naming the known kinds for another name."""
    return _REGISTRY.get(name)


def describe(name: str) -> dict:
    return _REGISTRY.describe(name, DESCRIBED)


def kinds() -> list[HeadKind]:
    """Every registered kind, in registration order."""
    return [get(name) for name in names()]


def train_command(kind: str) -> str:
    """The command that trains heads of `kind` (EAGLE-3 heads can also be imported:
    `specbench heads import PUBLISHED_EAGLE3_DIR --out HEADS_DIR`)."""
    return f"specbench train heads --kind {kind}{get(kind).train_flags} --data DATA.jsonl --out HEADS_DIR"


def positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def heads_and_layers(prefix: str) -> Callable[[Any, dict], str]:
    """`HeadKind.shape` for kinds of several heads of several layers: "H=<heads>,K=<layers>" from
    the loaded head, or before loading from the config's `<prefix>_num_heads` / `_num_layers`."""
    def shape(head: Any, cfg: dict) -> str:
        if head is not None:
            return f"H={head.n_heads},K={head.n_layers}"
        return f"H={cfg.get(prefix + '_num_heads', '?')},K={cfg.get(prefix + '_num_layers', '?')}"
    return shape
