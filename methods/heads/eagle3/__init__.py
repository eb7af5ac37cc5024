"""The EAGLE-3 head kind: `kind.py` its declaration (`KIND`), `method.py` the `eagle3` method,
`model.py` the head (`Eagle3Head`), `importer.py` SafeAILab's published EAGLE-3 heads and
`training.py` its own training code (feature layers, draft vocabulary, the new head, the
training-time test unroll). Its trainer hooks, the loss and the batches are in
specbench_cli/training/heads/eagle3.py: they use the trainer's losses, batches and
`TrainerHooks`, and code under methods/ imports nothing of `specbench_cli.training` (a layer
above it, pyproject.toml).
"""
