"""`specbench train`: drafters (`train drafter ...`), heads (`train heads`), SFT and MSN
(`train sft`, `train msn`), SPACE (`train space`); one module per subgroup beside this one."""

from __future__ import annotations

import typer

from specbench_cli.cli.train import heads, pard, sft, space
from specbench_cli.cli.train.draft_model import drafter_app

train_app = typer.Typer(help="Train models that help speculative decoding (draft models).", no_args_is_help=True)
train_app.add_typer(drafter_app, name="drafter")
heads.register(train_app)
sft.register(train_app)
space.register(train_app)
pard.register(train_app)
