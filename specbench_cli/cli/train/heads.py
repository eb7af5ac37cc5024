"""`specbench train heads`: Medusa / EAGLE / KOALA / Hydra / EAGLE-3 heads on the frozen target."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from specbench_cli.cli.train.common import (
    DATA_TEMPLATE,
    DEVICE,
    DTYPE,
    QUIET,
    THREADS,
    check_data_template,
    check_output_for_training,
    print_table,
)
from specbench_cli.errors import UsageError
from specbench_cli.methods.heads import kinds as head_kinds


def heads_cmd(
    data: Path = typer.Option(..., help="Distillation JSONL (from `train drafter distill-data`) or a feature-cache "
                              "folder (features.safetensors + features.json), or hf:PATH_OR_ID[:CONFIG][:SPLIT] "
                              "(instruction/response or ShareGPT conversations; needs --target)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the heads (+ checkpoints, history, curves)."),
    kind: str = typer.Option("eagle", help=f"A head kind: {' | '.join(head_kinds.HEAD_METHODS)} (or one a package "
                             "registers)."),
    heads_count: Optional[int] = typer.Option(None, "--heads-count", help="Medusa / Hydra heads H (head i predicts "
                                              "token t+2+i); default 3 for Medusa, 4 for Hydra (Hydra++'s recipe)."),
    layers: int = typer.Option(1, help="K: ResBlocks per Medusa / Hydra head, decoder layers of the EAGLE head "
                               "(KOALA: 2-3)."),
    hydra_arch: str = typer.Option("prefix-mlp", "--hydra-arch", help="Hydra heads: prefix-mlp (Hydra++: one "
                                   "decoder layer over the target's features) | mlp."),
    ttt_steps: int = typer.Option(7, "--ttt-steps", help="EAGLE-3: steps of the training-time test (the head "
                                  "unrolled on its own outputs; EAGLE-3's 7)."),
    draft_vocab: Optional[int] = typer.Option(None, "--draft-vocab", help="EAGLE-3: draft vocabulary = the N most "
                                              "frequent response tokens (default min(32000, target vocabulary, "
                                              "distinct response tokens))."),
    feature_layers: Optional[str] = typer.Option(None, "--feature-layers", help="EAGLE-3: the three target layers "
                                                 "A,B,C whose inputs the head reads (default 2,L//2,L-3)."),
    block_size: int = typer.Option(16, "--block-size", help="DFlash: the drafter's block (last verified token + "
                                   "block_size - 1 masks; the paper's 16)."),
    anchors: int = typer.Option(8, "--anchors", help="DFlash: blocks drawn per sequence per step."),
    loss_gamma: Optional[float] = typer.Option(None, "--loss-gamma", help="DFlash: position weight exp(-(k-1)/gamma) "
                                               "(default the paper's: 7 at block 16, 5 at 10, 4 at 8)."),
    mask_token: Optional[int] = typer.Option(None, "--mask-token", help="DFlash: the mask token id (default the "
                                             "target embedding's last row)."),
    target_layers: Optional[str] = typer.Option(None, "--target-layers", help="DFlash: target layers A,B,... whose "
                                                "outputs the drafter reads (default z-lab's rule for --layers)."),
    adversarial: bool = typer.Option(False, help="KOALA adversarial training (discriminator on target vs head logits)."),
    lam: float = typer.Option(0.1, "--lambda", help="Weight of the adversarial term in L_G (KOALA: 0.05-0.5)."),
    disc_layers: int = typer.Option(1, "--disc-layers", help="FC layers of the discriminator."),
    steps: int = typer.Option(300), batch_size: int = typer.Option(4, help="Sequences per step."),
    lr: float = typer.Option(1e-3), disc_lr: float = typer.Option(1e-4, "--disc-lr"),
    max_len: int = typer.Option(384, help="Tokens per sequence (prompt + response) for features and training."),
    features: Optional[Path] = typer.Option(None, help="Where to cache target features (default: DATA.features/)."),
    full_vocab: bool = typer.Option(False, "--full-vocab", help="Softmax over the whole vocabulary instead of the "
                                    "tokens seen in the data (slower on CPU)."),
    target: Optional[str] = typer.Option(None, "--target", "-m", help="Target model (default: the data's 'target')."),
    autocast: bool = typer.Option(False, "--autocast", help="bfloat16 autocast for the heads' training step "
                                  "(float32 weights; ~2.5x faster on CPUs with AMX / AVX512-BF16)."),
    save_every: int = typer.Option(50), seed: int = typer.Option(0),
    resume: bool = typer.Option(False, help="Continue from the latest checkpoint in --out."),
    force: bool = typer.Option(False, "--force", help="Start over in an --out holding an earlier output of this "
                               "command (its checkpoints removed; a folder holding other files is refused even so)."),
    prompt_template: Optional[str] = DATA_TEMPLATE,
    dtype: str = DTYPE, device: str = DEVICE, threads: Optional[int] = THREADS, quiet: bool = QUIET,
):
    """Train Medusa / EAGLE / KOALA / Hydra / EAGLE-3 / DFlash draft heads on the frozen target's cached features."""
    from specbench_cli.methods.heads.dflash.training import parse_target_layers
    from specbench_cli.methods.heads.eagle3.training import parse_feature_layers
    from specbench_cli.models.load import check_device, torch_dtype
    from specbench_cli.models.prompting import set_threads
    from specbench_cli.training.heads.train import HEADS_RECORDS, HeadsRecipe, heads_training_output, trainer_hooks

    if heads_count is None:  # the kind's default (an unknown kind is refused by the recipe's check)
        heads_count = trainer_hooks(kind).heads_count if kind in head_kinds.names() else 3
    recipe = HeadsRecipe(kind=kind, heads_count=heads_count, layers=layers, arch=hydra_arch, adversarial=adversarial, lam=lam,
                         disc_layers=disc_layers, steps=steps, batch_size=batch_size, lr=lr, disc_lr=disc_lr,
                         max_len=max_len, save_every=save_every, seed=seed, sub_vocab=not full_vocab,
                         autocast=autocast, ttt_steps=ttt_steps, draft_vocab=draft_vocab,
                         feature_layers=parse_feature_layers(feature_layers), block_size=block_size, anchors=anchors,
                         loss_gamma=loss_gamma, mask_token=mask_token, target_layers=parse_target_layers(target_layers))
    recipe.validate()
    torch_dtype(dtype)
    check_device(device)
    set_threads(threads)
    check_data_template(prompt_template)
    data = data.expanduser()
    if not str(data).startswith("hf:") and not data.exists():
        raise UsageError(f"--data not found: {data}")
    # before the target loads and features are built
    out = check_output_for_training(out, resume, force, heads_training_output(), HEADS_RECORDS, flag="--out")
    if trainer_hooks(kind).reads_layers and target is not None:  # the target's layers, from its header: before any data is read
        from specbench_cli.models.load import declared_layers

        if (n_layers := declared_layers(target)) is not None:
            trainer_hooks(kind).feature_layers(recipe, n_layers)
    from specbench_cli.training.heads.pipeline import run_heads

    _, table = run_heads(data, out, recipe, features, target, dtype, device, resume, not quiet,
                         template=prompt_template)
    print_table(f"train heads -> {out}", table)


def register(app: typer.Typer) -> None:
    app.command("heads")(heads_cmd)
