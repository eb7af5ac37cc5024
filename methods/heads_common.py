"""What the `medusa` and `eagle` methods share: the heads folder option, its checks against the
target, the label from the checkpoint's metadata, the parameter count, chain drafting under
sampling. The heads themselves are `specbench_cli/training/heads_model.py` (docs/methods/heads.md).

Checks, as early as each can run:
- plan (no model): `heads` given, a heads folder of this method's kind, trained for this run's
  target when both names are known (compared after resolving aliases and paths);
- setup (target loaded): the head's hidden size and vocabulary equal the target's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Optional

import torch

from specbench_cli.engine.drafter import Structure
from specbench_cli.engine.verify import target_probs
from specbench_cli.errors import UsageError
from specbench_cli.methods.base import Method, user_options


def train_command(kind: str) -> str:
    extra = " --heads-count 3" if kind == "medusa" else " --layers 1"
    return f"specbench train heads --kind {kind}{extra} --data DATA.jsonl --out HEADS_DIR"


def _same_target(a: str, b: str) -> bool:
    """Do two model references name the same model? Aliases and paths are resolved first, so
    `smollm2-135m` and the .gguf file it stands for agree; unresolvable names compare as text."""
    from specbench_cli.models import resolve

    def key(ref: str) -> str:
        try:
            return str(Path(resolve(ref)[1]).expanduser().resolve())
        except Exception:  # noqa: BLE001 - a name we cannot resolve is compared as written
            return ref
    return a == b or key(a) == key(b)


class HeadsMethod(Method):
    """Base of `medusa` / `eagle`: subclasses set `name`, `kind`, `Options` (with `heads` and
    `chain`) and implement `plan_kind`, `setup_kind`, `tree` and `chain_draft`."""

    kind: ClassVar[str] = ""
    lossless = True
    needs_training = True  # needs a trained heads folder: not in the default method list
    structure = Structure.TREE
    needs_hidden_states = True

    # -- configuration ----------------------------------------------------------------------
    def plan(self) -> None:
        from specbench_cli.training.heads_model import read_heads_config

        if not self.opts.heads:
            raise UsageError(f"method {self.name} needs trained heads: pass -o {self.name}.heads=HEADS_DIR "
                             f"(train them with: {train_command(self.kind)})")
        self.folder = Path(self.opts.heads).expanduser()
        kind, self.config = read_heads_config(self.folder)
        if kind != self.kind:
            raise UsageError(f"{self.folder} holds {kind} heads, not {self.kind} heads: "
                             f"run them with -o {kind}.heads={self.opts.heads} (method {kind})")
        self.meta = self.config.get("specbench", {})
        trained_for, target = self.meta.get("target"), getattr(self.ctx, "target", None)
        if trained_for and target and not _same_target(str(trained_for), str(target)):
            raise UsageError(f"heads {self.folder} were trained for target '{trained_for}', this run's target is "
                             f"'{target}'; train heads for it: {train_command(self.kind)} --target {target}")
        # Speculative sampling needs the drafter's probabilities, which the verifier takes on chains only.
        self.use_chain = bool(self.opts.chain) or not self.ctx.sampling.greedy
        if self.use_chain:
            self.structure = Structure.CHAIN  # instance attribute: k-alpha is reported for chains
        self.n_draft = max(0, self.ctx.budget - 1)
        self.head: Any = None
        self.plan_kind()

    def setup(self) -> None:
        """Load the heads onto the target's device and dtype, check they fit the target."""
        from specbench_cli.training.heads_model import load_heads

        model = self.ctx.model
        weight = model.get_output_embeddings().weight
        head = load_heads(self.folder, model, dtype=weight.dtype).to(weight.device)
        hidden, vocab = int(model.config.hidden_size), int(weight.shape[0])
        h_head = int(head[0][0].linear.weight.shape[0]) if self.kind == "medusa" else int(head.config.hidden_size)
        v_head = None if self.kind == "medusa" else int(head.config.vocab_size)  # Medusa v2 has no own vocabulary
        if h_head != hidden or (v_head is not None and v_head != vocab):
            raise UsageError(f"heads {self.folder} (hidden {h_head}, vocab {v_head or 'target'}) do not fit this "
                             f"target (hidden {hidden}, vocab {vocab}): trained for '{self.meta.get('target', '?')}'")
        self.head = head
        self.device = weight.device
        # One stream per run, as sps: every drafted token must be a fresh sample.
        self.rng = torch.Generator(device="cpu").manual_seed((int(self.ctx.seed) * 1_000_003 + 0x4EAD) & 0x7FFFFFFF)
        self.setup_kind()

    def plan_kind(self) -> None:
        """Resolve kind-specific options (no model)."""

    def setup_kind(self) -> None:
        """Kind-specific set-up once `self.head` is loaded."""

    # -- description ------------------------------------------------------------------------
    @property
    def extra_params(self) -> int:
        if self.head is not None:
            return sum(p.numel() for p in self.head.parameters())
        return int(self.meta.get("params", 0))

    def head_label(self) -> str:
        """`eagle(K=3,adv)` / `medusa(H=3,K=2)` from the metadata (or the weights, for public heads)."""
        if self.meta.get("label"):
            return str(self.meta["label"])
        adv = ",adv" if self.meta.get("adversarial") else ""
        return f"{self.kind}({self.shape_text()}{adv})"

    def shape_text(self) -> str:
        raise NotImplementedError

    def label(self) -> str:
        """The head's label plus the options the user changed (the folder itself is not shown)."""
        given = {k: v for k, v in user_options(self.opts).items() if k != "heads"}
        base = self.head_label()
        if not given:
            return base
        extra = ",".join(f"{k}={v}" for k, v in given.items())
        return base[:-1] + "," + extra + ")" if base.endswith(")") else f"{base}({extra})"

    def params(self) -> dict:
        return {"heads": str(self.folder), "head": self.head_label(), "structure": self.structure.value,
                "trained_for": self.meta.get("target"), "data_tokens": self.meta.get("data_tokens"),
                "training_seconds": self.meta.get("training_seconds"), **self.kind_params()}

    def kind_params(self) -> dict:
        return {}

    # -- sampling ---------------------------------------------------------------------------
    def pick(self, logits: torch.Tensor) -> tuple[int, Optional[torch.Tensor]]:
        """`[V]` head logits -> (token, `[V]` probabilities it was drawn from | None when greedy).

        Under sampling the head's logits get the target's temperature / top-p processing, so
        speculative sampling compares like with like (as sps does)."""
        if self.ctx.sampling.greedy:
            return int(logits.argmax()), None
        p = target_probs(logits, self.ctx.sampling).to("cpu", torch.float32)
        return int(torch.multinomial(p, 1, generator=self.rng)), p
