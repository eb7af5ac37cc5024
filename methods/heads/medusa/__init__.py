"""The Medusa head kind (Cai et al. 2024): `kind.py` its declaration (`KIND`), `method.py` the
`medusa` method, `importer.py` Medusa-1's published heads and `importer_medusa2.py` Medusa-2's
full models. Its head module is `MedusaHeads` in the shared methods/heads/model.py (EAGLE's and
Hydra's heads build on its pieces); its trainer hooks are `MEDUSA` in
specbench_cli/training/heads/hooks.py, assembled from the trainer's shared pieces (code under
methods/ imports nothing of `specbench_cli.training`), so it has no `training.py` here.
"""
