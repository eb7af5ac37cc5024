"""PARD training (An et al. 2025): adapt a small autoregressive draft model into a parallel one
that reads K-1 mask tokens after the text and predicts the next K tokens in one forward.

One training sequence x_0 .. x_{L-1} (prompt + response) is expanded into K groups of L slots:

- group 0: the tokens themselves, causal; slot p predicts x_{p+1} (ordinary next-token loss);
- group g (1 <= g < K): mask tokens. Slot (g, p) sits at position p and stands for "the text up
  to x_{p-g}, then g masks": it sees group 0 slots 0 .. p-g, the slots (j, p-g+j) of the groups
  j < g (the masks before it in its own chain) and itself, and predicts x_{p+1}. At inference the
  draft model reads the accepted text and K-1 masks: mask g's logits guess the token g+1 after
  the last accepted one, which is what slot (g, p) learns with p - g the last accepted position.

Conditional drop (COD): group g keeps only a share max(r^g, r_min) of the group-0 loss slots
(r = `retain`, r_min = `retain_min`; the paper's 0.7 and 0.2), drawn at random among the slots
whose predecessor in the chain, (g-1, p-1), was kept, so every kept mask still sees its whole
chain. Group 0 is kept whole. The kept slots are packed into one sequence with position ids p
and the attention mask above; the draws come from (seed, step, example), so a resumed run
draws the same.

Loss: the mean cross-entropy over every kept slot whose target is a response token (the
positions `Example.start .. end`), all groups weighted alike.

The mask token: the id the drafter's config.json records as `pard_token` (with `spd_type:
"pard"`, the published drafters' keys); if it has none, `--mask-id`; else the first embedding
row no token of the tokenizer uses, growing the embeddings (and output head) by one row when
every row is a token. The row starts as the mean of the embeddings (transformers' resizing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from specbench_cli.errors import UsageError
from specbench_cli.training.common.io import write_json
from specbench_cli.training.common.loop import TrainConfig, train_loop
from specbench_cli.training.draft_model.finetune import Example, batch_indices, build_examples, model_device

MASK_KEY = "pard_token"
TYPE_KEY = "spd_type"


@dataclass
class PardRecipe:
    k: int = 8                # K: tokens drafted per forward in training (K-1 mask groups); the paper's 8
    retain: float = 0.7       # COD: group g keeps max(retain^g, retain_min) of the loss slots; 1 = no drop
    retain_min: float = 0.2

    def validate(self) -> None:
        if not 1 <= self.k <= 64:
            raise UsageError(f"--k must be in 1..64, got {self.k}")
        if not 0 < self.retain <= 1 or not 0 <= self.retain_min <= 1:
            raise UsageError(f"--retain must be in (0, 1] and --retain-min in [0, 1] "
                             f"(got {self.retain}, {self.retain_min})")

    def share(self, g: int) -> float:
        """The share of group 0's loss slots mask group g keeps."""
        return 1.0 if g == 0 else max(self.retain ** g, self.retain_min)


def prepare_mask_token(model: Any, tokenizer: Any, mask_id: Optional[int] = None) -> int:
    """The drafter's mask token id, recorded in its config (`pard_token`, `spd_type`); the
    embeddings grow by one row when the mask needs a new one (see the module docstring)."""
    declared = getattr(model.config, MASK_KEY, None)
    if isinstance(declared, list) and declared:
        declared = declared[0]
    rows = model.get_input_embeddings().weight.shape[0]
    if isinstance(declared, int) and not isinstance(declared, bool) and 0 <= declared < rows:
        if mask_id is not None and mask_id != declared:
            raise UsageError(f"the drafter already declares mask token {declared} ({MASK_KEY}); --mask-id {mask_id} "
                             f"differs")
        chosen = declared
    elif mask_id is not None:
        if not 0 <= mask_id < rows:
            raise UsageError(f"--mask-id {mask_id} is outside the drafter's {rows} embedding rows")
        chosen = mask_id
    elif rows > len(tokenizer):
        chosen = len(tokenizer)  # a padding row no token uses
    else:
        model.resize_token_embeddings(rows + 1)
        chosen = rows
    model.config.pard_token = int(chosen)
    model.config.spd_type = "pard"
    return int(chosen)


def kept_slots(ex: Example, recipe: PardRecipe, generator) -> list[list[int]]:
    """Per group g, the positions p of its kept slots (ascending); group 0 is every position.

    A mask slot (g, p) needs p >= g (at least one real token before its masks), p <= L - 2 (a
    target) and its predecessor (g-1, p-1) kept; slots up to K-1 positions before the loss
    range are candidates too (the chains that reach into it), but the number kept is counted
    against the group-0 loss slots."""
    import torch

    n = len(ex.input_ids)
    slots = [list(range(n))]
    loss_slots = ex.end - ex.start
    lo = max(0, ex.start - recipe.k + 1)
    for g in range(1, recipe.k):
        prev = set(slots[-1])
        cands = [p for p in range(max(g, lo), min(ex.end, n - 1)) if (p - 1) in prev]
        want = min(len(cands), int(loss_slots * recipe.share(g) + 1e-9))
        if want <= 0:
            break
        if want < len(cands):
            pick = torch.randperm(len(cands), generator=generator)[:want].tolist()
            cands = sorted(cands[i] for i in pick)
        slots.append(cands)
    return slots


def expand(ex: Example, mask_id: int, slots: list[list[int]]):
    """One example's packed PARD sequence: (input_ids, position_ids, targets, allowed [S, S] bool);
    targets are -100 where no loss counts."""
    import torch

    ids, pos, tgt, index = [], [], [], {}
    for g, positions in enumerate(slots):
        for p in positions:
            index[(g, p)] = len(ids)
            ids.append(ex.input_ids[p] if g == 0 else mask_id)
            pos.append(p)
            counts = ex.start <= p < ex.end and p + 1 < len(ex.input_ids)
            tgt.append(ex.input_ids[p + 1] if counts else -100)
    s = len(ids)
    allowed = torch.zeros((s, s), dtype=torch.bool)
    for (g, p), row in index.items():
        if g == 0:
            allowed[row, : p + 1] = True
            continue
        allowed[row, : p - g + 1] = True  # the text up to x_{p-g}
        for j in range(1, g + 1):  # its chain: (j, p-g+j), itself last
            allowed[row, index[(j, p - g + j)]] = True
    return ids, pos, tgt, allowed


def pard_batch(examples: list[Example], mask_id: int, recipe: PardRecipe, generators: list, pad_id: int, device=None):
    """Collate expanded examples, right-padded: input_ids, position_ids, targets (B, S) and the
    attention mask (B, 1, S, S) bool (a padding slot sees only itself and has no target)."""
    import torch

    packed = [expand(ex, mask_id, kept_slots(ex, recipe, gen)) for ex, gen in zip(examples, generators)]
    width = max(len(p[0]) for p in packed)
    b = len(packed)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    pos = torch.zeros((b, width), dtype=torch.long)
    tgt = torch.full((b, width), -100, dtype=torch.long)
    mask = torch.eye(width, dtype=torch.bool).repeat(b, 1, 1)
    for i, (x, p, t, allowed) in enumerate(packed):
        s = len(x)
        ids[i, :s] = torch.tensor(x)
        pos[i, :s] = torch.tensor(p)
        tgt[i, :s] = torch.tensor(t)
        mask[i, :s, :s] = allowed
    return ids.to(device), pos.to(device), tgt.to(device), mask[:, None].to(device)


def pard_loss(model: Any, ids, pos, tgt, mask):
    """Mean cross-entropy over the slots with a target (the output head runs on those only)."""
    import torch.nn.functional as F

    hidden = model.get_decoder()(input_ids=ids, position_ids=pos, attention_mask=mask).last_hidden_state
    sel = tgt != -100
    logits = model.get_output_embeddings()(hidden[sel]).float()
    return F.cross_entropy(logits, tgt[sel])


def step_generators(seed: int, step: int, idx: list[int]) -> list:
    """One COD random stream per example of step `step`: a function of (seed, step, example)."""
    import torch

    return [torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + i) & 0x7FFFFFFFFFFF) for i in idx]


def train_pard(drafter: Any, tokenizer: Any, rows: list[dict], out: Path, cfg: TrainConfig, recipe: PardRecipe,
               mask_id: Optional[int] = None, max_len: int = 384, meta: Optional[dict] = None,
               resume: bool = False, progress: bool = True) -> dict:
    """Train `drafter` with the PARD objective on instruction/response `rows` (every row is
    training data: the objective needs no target model). Writes the PARD drafter folder to `out`
    (config.json with `pard_token` and `spd_type`), checkpoints under out/checkpoints."""
    t0 = time.time()
    recipe.validate()
    if max_len < 8:
        raise UsageError("--max-len must be >= 8")
    examples = build_examples(rows, tokenizer, drafter, max_len)
    if not examples:
        raise UsageError("no training example: every row's prompt fills --max-len")
    mask = prepare_mask_token(drafter, tokenizer, mask_id)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = model_device(drafter)

    def step_fn(step: int):
        idx = batch_indices(len(examples), cfg.batch_size, step, cfg.seed)
        batch = pard_batch([examples[i] for i in idx], mask, recipe, step_generators(cfg.seed, step, idx),
                           pad_id, device)
        value = pard_loss(drafter, *batch)
        return value, {"loss": value.item(), "slots": float(batch[0].shape[1])}

    meta = {**(meta or {}), "kind": "pard", "k": recipe.k, "retain": recipe.retain, "retain_min": recipe.retain_min,
            "mask_id": mask, "max_len": max_len, "train_examples": len(examples)}
    drafter.train()
    summary = train_loop(drafter, tokenizer, out, cfg, step_fn, meta, resume=resume, progress=progress,
                         title=f"pard K={recipe.k}")
    summary["wall_seconds_total"] = round(time.time() - t0, 2)
    write_json(Path(out) / "training.json", summary)
    return summary


def mean_loss(drafter: Any, examples: list[Example], mask_id: int, recipe: PardRecipe, pad_id: int = 0,
              seed: int = 0) -> float:
    """The PARD loss of `drafter` on `examples` (no gradient; fixed COD draws from `seed`)."""
    import torch

    with torch.no_grad():
        batch = pard_batch(examples, mask_id, recipe, step_generators(seed, 0, list(range(len(examples)))),
                           pad_id, model_device(drafter))
        return float(pard_loss(drafter, *batch))

