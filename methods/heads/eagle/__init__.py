"""The EAGLE head kind (EAGLE, EAGLE-2's dynamic trees, KOALA's K-layer heads): `kind.py` its
declaration (`KIND`), `method.py` the `eagle` method (which `eagle3` extends), `importer.py`
SafeAILab's published EAGLE heads. Its head module is `EagleHead` in the shared
methods/heads/model.py; its trainer hooks are `EAGLE` in specbench_cli/training/heads/hooks.py,
assembled from the trainer's shared pieces (code under methods/ imports nothing of
`specbench_cli.training`), so it has no `training.py` here.
"""
