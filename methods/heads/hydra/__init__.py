"""The Hydra head kind (Hydra and Hydra++, sequentially dependent heads): `kind.py` its
declaration (`KIND`), `method.py` the `hydra` method, `model.py` the heads (`HydraHeads`),
`importer.py` the published Hydra heads. Its trainer hooks are `HYDRA` in
specbench_cli/training/heads/hooks.py, assembled from the trainer's shared pieces (code under
methods/ imports nothing of `specbench_cli.training`), so it has no `training.py` here.
"""
