"""The DFlash head kind (a block-diffusion drafter on the target's hidden states): `kind.py` its
declaration (`KIND`), `method.py` the `dflash` method, `model.py` the drafter
(`DFlashDrafter`), `importer.py` z-lab's published drafters and `training.py` its training (the
block objective, the new drafter). Its trainer hooks are in specbench_cli/training/heads/dflash.py:
they join that code to the trainer's batches and `TrainerHooks`, which code under methods/ may
not import (`specbench_cli.training` is a layer above it, pyproject.toml).
"""
