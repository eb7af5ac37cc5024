"""What the head methods (`medusa`, `eagle`, `eagle3`, `hydra`: one per head kind,
methods/heads/<kind>/) share: the base class `HeadsMethod` (the heads folder as option `heads`,
its checks against the target, chain drafts under sampling, the label from the checkpoint's
metadata, the parameter count) and the sampled draft token. What differs by kind (weight file,
how the head is built and fits the target, its shape in labels) is the kind's declaration; the
head modules are in the kinds' packages and methods/heads/model.py (docs/methods/heads.md).

Checks, as early as each can run:
- plan (no model): `heads` given, a heads folder of this method's kind, trained for this run's
  target when both names are known (compared after resolving aliases and paths);
- setup (target loaded): the head's hidden size and vocabulary equal the target's.

Draft vocabulary (option `vocab`, docs/methods/heads.md): `auto` (default) restricts the heads'
logits to the folder's `draft_vocab.safetensors` (the training sub-vocabulary) plus the current
prompt's tokens; `full` uses all V rows of the LM head. Exactness does not depend on it: the
target verifies every drafted token, and under sampling the draft distribution is scattered
back to [V] (zero outside the vocabulary), which speculative sampling accepts as any q.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from specbench_cli.decoding.drafter import Structure
from specbench_cli.decoding.verify import SamplingConfig, target_probs
from specbench_cli.errors import UsageError
from specbench_cli.lazy import torch
from specbench_cli.methods.core.method import Method
from specbench_cli.methods.heads import kinds
from specbench_cli.methods.heads.kinds import HEAD_METHODS, train_command
from specbench_cli.options import user_options


def apply_heads_flag(methods: list[str], options: dict[str, dict[str, str]], heads: Optional[str]) -> None:
    """`specbench run --heads PATH`: the same as `-o METHOD.heads=PATH` for the one head method
    of `methods` (one of `HEAD_METHODS`) that has no `-o METHOD.heads` yet; edits `options` in place.
    UsageError when no head method is selected or the choice is ambiguous."""
    if not heads:
        return
    chosen = [m for m in methods if m in HEAD_METHODS]
    if not chosen:
        raise UsageError(f"--heads needs a head method in --methods ({' or '.join(HEAD_METHODS)})")
    free = [m for m in chosen if "heads" not in options.get(m, {})]
    if len(free) != 1:
        why = "both have" if not free else "neither has"
        raise UsageError(f"--heads is ambiguous: {' and '.join(chosen)} are selected and {why} -o METHOD.heads; "
                         f"give each its folder with -o {chosen[0]}.heads=DIR -o {chosen[-1]}.heads=DIR")
    options.setdefault(free[0], {})["heads"] = heads


def _same_target(a: str, b: str) -> bool:
    """Do two model references name the same model? Aliases and paths are resolved first, so
    `smollm2-135m` and the .gguf file it stands for agree; unresolvable names compare as text."""
    from specbench_cli.models.load import resolve

    def key(ref: str) -> str:
        try:
            return str(Path(resolve(ref)[1]).expanduser().resolve())
        except Exception:  # noqa: BLE001 - a name we cannot resolve is compared as written
            return ref
    return a == b or key(a) == key(b)


def check_sizes_against_header(kind: str, config: dict, target: str, folder: Path) -> None:
    """Before the target loads: the widths a heads config declares against the target's header
    (its hidden size, and the vocabulary of heads that carry one: the kind's `header_sizes`;
    Medusa's widths come from its tensors, checked once the target is loaded); an unreadable
    header checks nothing."""
    from specbench_cli.models.load import declared_field, declared_vocab

    try:
        vocab, hidden = declared_vocab(target), declared_field(target, "embedding_length", "hidden_size")
    except UsageError:
        return  # the target reference itself is checked (and named) by the run
    declared = {"hidden": hidden, "vocab": vocab}
    for key, want in ((key, declared[what]) for key, what in kinds.get(kind).header_sizes(config)):
        have = config.get(key)
        if want is not None and isinstance(have, int) and not isinstance(have, bool) and have != want:
            raise UsageError(f"heads {folder}: config.json's '{key}' is {have}, the target '{target}' declares "
                             f"{want} (heads made for another model)")


VOCAB_MODES = ("auto", "full")


class HeadsCheckpoint:
    """A heads folder opened for method `method` (kind `kind`): read and checked at plan time
    (config.json and the draft vocabulary, no weights), loaded onto the target by `load` at setup."""

    def __init__(self, method: str, kind: str, ref: Optional[str], target: Optional[str],
                 vocab: str = "auto") -> None:
        if vocab not in VOCAB_MODES:
            raise UsageError(f"{method}.vocab must be one of {', '.join(VOCAB_MODES)} (got '{vocab}')")
        if not ref:  # checked before the heads code (and torch) is imported: this is the common mistake
            raise UsageError(f"method {method} needs trained heads: pass --heads HEADS_DIR (or -o {method}.heads=HEADS_DIR) "
                             f"(train them with: {train_command(kind)})")
        from specbench_cli.methods.heads.checkpoint import inspect_heads, load_draft_vocab

        self.kind, self.folder = kind, Path(ref).expanduser()
        found, self.config = inspect_heads(self.folder)  # config, file bytes, keys and shapes: before the target loads
        if found != kind:
            raise UsageError(f"{self.folder} holds {found} heads, not {kind} heads: "
                             f"run them with method {found} (-o {found}.heads={ref})")
        self.meta: dict = self.config.get("specbench", {})
        if target:
            check_sizes_against_header(kind, self.config, str(target), self.folder)
        trained_for = self.meta.get("target")
        if trained_for and target and not _same_target(str(trained_for), str(target)):
            raise UsageError(f"heads {self.folder} were trained for target '{trained_for}', this run's target is "
                             f"'{target}'; train heads for it: {train_command(kind)} --target {target}")
        self.vocab = load_draft_vocab(self.folder) if vocab == "auto" else None  # [V'] or None = full
        self.head: Any = None

    def load(self, target: Any) -> Any:
        """The head on the target's device and dtype, bound to the target (decoding/target.py: its
        output projection, token embeddings and config); UsageError if it does not fit."""
        from specbench_cli.methods.heads.checkpoint import load_heads
        from specbench_cli.targets import as_target

        target = as_target(target)
        weight = target.output_projection().weight
        head = load_heads(self.folder, target, dtype=weight.dtype).to(weight.device)
        hidden, vocab = int(target.config.hidden_size), target.vocab_size
        h_head, v_head, own_vocab = kinds.get(self.kind).fit(head, target, self.folder)
        if own_vocab:
            self.vocab = None  # its own projection covers its vocabulary: no draft vocabulary
        if h_head != hidden or (v_head is not None and v_head != vocab):
            raise UsageError(f"heads {self.folder} (hidden {h_head}, vocab {v_head or 'target'}) do not fit this "
                             f"target (hidden {hidden}, vocab {vocab}): trained for '{self.meta.get('target', '?')}'")
        if self.vocab is not None and int(self.vocab.max()) >= vocab:
            raise UsageError(f"{self.folder}: draft vocabulary has ids >= the target's vocabulary ({vocab})")
        self.head = head
        self.target_vocab = vocab  # the width of `Draft.probs` rows under sampling (`pick`)
        return head

    def prompt_vocab(self, prompt_ids: list[int]) -> None:
        """Set the head's draft vocabulary for one prompt: the stored ids plus the prompt's tokens
        (copied text is a common continuation). No-op with the full vocabulary."""
        if self.vocab is None:
            return
        v = int(self.head.lm_head.weight.shape[0])
        prompt = torch.tensor([t for t in prompt_ids if 0 <= t < v], dtype=torch.long)
        self.head.use_vocab(torch.cat([self.vocab, prompt]).unique())  # sorted

    @property
    def n_params(self) -> int:
        """The heads' own parameters (the target's embedding and LM head they reuse excluded)."""
        if self.head is not None:
            return sum(p.numel() for p in self.head.parameters())
        return int(self.meta.get("params", 0))

    def shape_text(self) -> str:
        return kinds.get(self.kind).shape(self.head, self.config)

    def head_label(self) -> str:
        """`eagle(K=3,adv)` / `medusa(H=3,K=2)`: from the metadata, else from the weights (public heads)."""
        if self.meta.get("label"):
            return str(self.meta["label"])
        adv = ",adv" if self.meta.get("adversarial") else ""
        return f"{self.kind}({self.shape_text()}{adv})"

    def label(self, given: dict) -> str:
        """The head's label plus the options the user changed (`given`; the folder is not shown)."""
        given = {k: v for k, v in given.items() if k != "heads"}
        base = self.head_label()
        if not given:
            return base
        extra = ",".join(f"{k}={v}" for k, v in given.items())
        return base[:-1] + "," + extra + ")" if base.endswith(")") else f"{base}({extra})"

    def params(self) -> dict:
        return {"heads": str(self.folder), "head": self.head_label(), "trained_for": self.meta.get("target"),
                "data_tokens": self.meta.get("data_tokens"), "training_seconds": self.meta.get("training_seconds")}


def draws_chains(chain_option: bool, sampling: SamplingConfig) -> bool:
    """Chain drafts when asked, and always under sampling: speculative sampling needs the
    drafter's probabilities, which the verifier takes on chains only."""
    return bool(chain_option) or not sampling.greedy


def sampling_rng(seed: int) -> torch.Generator:
    """One stream per run, as sps: every drafted token must be a fresh sample."""
    return torch.Generator(device="cpu").manual_seed((int(seed) * 1_000_003 + 0x4EAD) & 0x7FFFFFFF)


def pick(logits: torch.Tensor, sampling: SamplingConfig, rng: torch.Generator,
         head: Any, vocab: int) -> tuple[int, Optional[torch.Tensor]]:
    """`[V']` head logits (draft vocabulary of `head`, or all V) -> (target token id, `[V]`
    probabilities it was drawn from | None when greedy); `vocab` is the target's V.

    Under sampling the head's logits get the target's temperature / top-p processing, so
    speculative sampling compares like with like (as sps does); with a draft vocabulary the
    distribution is scattered back to [V], zero elsewhere. V is the target's, not the head's
    projection's: an EAGLE-3 head projects onto its own smaller draft vocabulary."""
    if sampling.greedy:
        return int(head.to_target(logits.argmax())), None
    p = target_probs(logits, sampling).to("cpu", torch.float32)
    i = torch.multinomial(p, 1, generator=rng)
    ids = head.draft_ids
    if ids is None:
        return int(i), p
    full = torch.zeros(int(vocab), dtype=torch.float32)
    full[ids.cpu()] = p
    return int(ids[i.to(ids.device)]), full


class HeadsMethod(Method):
    """A method that drafts from trained heads on the target's hidden states. Subclasses set
    `kind` (the heads folder's kind), an `Options` dataclass with `heads`, `vocab` and `chain`,
    and `propose`; `plan_tree()` / `tree_params()` add their own checks and parameters."""

    kind: str = ""  # a registered head kind (methods/heads/kinds/)
    lossless = True
    needs_training = True  # needs a trained heads folder: not in the default method list
    requires = ("heads",)
    structure = Structure.TREE
    needs_hidden_states = True
    needs = ("hidden_states", "output_projection", "token_embeddings", "config")

    def plan(self) -> None:
        self.plan_tree()
        self.ckpt = HeadsCheckpoint(self.name, self.kind, self.opts.heads, self.ctx.target_ref, self.opts.vocab)
        self.chain = draws_chains(self.opts.chain, self.ctx.sampling)
        if self.chain:
            self.structure = Structure.CHAIN  # instance attribute: k-alpha is reported for chains

    def plan_tree(self) -> None:
        """Check and resolve the tree options (before the heads folder is read)."""

    def setup(self) -> None:
        self.head = self.ckpt.load(self.ctx.target)
        self.rng = sampling_rng(self.ctx.seed)

    @property
    def extra_params(self) -> int:
        return self.ckpt.n_params

    def label(self) -> str:
        return self.ckpt.label(user_options(self.opts))

    def params(self) -> dict:
        return {**self.ckpt.params(), "structure": self.structure.value, **self.tree_params()}

    def tree_params(self) -> dict:
        return {}

    def reset(self, prompt_ids: list[int]) -> None:
        self.ckpt.prompt_vocab(prompt_ids)
