"""Glue of `specbench train heads`: data -> cached features -> trainer -> summary table."""

from __future__ import annotations

import time
from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.training.heads.data import FEATURES_FILE, build_feature_cache, load_feature_cache
from specbench_cli.training.heads.train import HeadsRecipe, train_heads


def _rows_target(data: Path, template: str | None) -> tuple[list[dict], str | None, str]:
    from specbench_cli.training.draft_model.distill_data import load_training_rows
    from specbench_cli.training.draft_model.finetune import check_distill_rows

    rows = load_training_rows(data, "distillation file", template)
    template = check_distill_rows(rows, data, template)
    refs = {r.get("target") for r in rows}
    return rows, (refs.pop() if len(refs) == 1 else None), template


def run_heads(data: Path, out: Path, recipe: HeadsRecipe, features: Path | None, target: str | None,
              dtype: str, device: str, resume: bool, progress: bool,
              template: str | None = None) -> tuple[dict, dict]:
    """Load the target, get (or build once) the feature cache, train; returns the training
    summary and the rows of the table the command prints."""
    from rich.progress import Progress

    from specbench_cli.console import err
    from specbench_cli.models.load import load_model
    from specbench_cli.training.heads.train import trainer_hooks

    t0 = time.time()
    hooks = trainer_hooks(recipe.kind)
    if data.is_dir() and not str(data).startswith("hf:"):
        cache_dir, rows = data, None
        cached = load_feature_cache(data).meta
        if hooks.reads_layers and cached.get("kind") != "eagle3":  # a cache of the last hidden state only
            hooks.check_cache(load_feature_cache(data), data, ())
        target = target or cached.get("target")
        have = cached.get("prompt_template") or "auto"
        if template is not None and template != have:
            raise UsageError(f"feature cache {data} was built from prompts in template {have}, not {template}")
        template = have
    else:
        rows, data_target, template = _rows_target(data, template)
        target = target or data_target
        default = Path(str(data).split(":")[1]).expanduser() if str(data).startswith("hf:") else data
        cache_dir = (features or default.with_name(default.name + hooks.cache_suffix)).expanduser()
    if not target:
        raise UsageError(f"{data} does not name one target model; pass --target")
    if rows is not None and cache_dir.is_symlink() and not (cache_dir / FEATURES_FILE).is_file():
        from specbench_cli.errors import link_refused

        raise link_refused(cache_dir)  # the cache would be written into the folder it names: before the target loads
    if hooks.reads_layers:
        from specbench_cli.models.load import declared_layers

        declared = declared_layers(target)
        if declared is not None:  # the layer check before the target loads, when its header tells
            hooks.feature_layers(recipe, declared)
    lm = load_model(target, device=device, dtype=dtype)
    layers = hooks.feature_layers(recipe, int(lm.model.config.num_hidden_layers))  # None: the last state only
    if layers is not None and (cache_dir / FEATURES_FILE).is_file():
        hooks.check_cache(load_feature_cache(cache_dir), cache_dir, layers)
    if rows is not None and not (cache_dir / FEATURES_FILE).is_file():
        with Progress(console=err, disable=not progress) as bar:
            task = bar.add_task("target features", total=len(rows))
            build_feature_cache(lm.model, lm.tokenizer, rows, cache_dir, recipe.max_len,
                                meta={"target": target, "data": str(data), "rows": len(rows), "dtype": dtype,
                                      "prompt_template": template},
                                on_batch=lambda n: bar.advance(task, n), feature_layers=layers)
    cache = load_feature_cache(cache_dir)
    if cache.features.shape[1] != lm.model.config.hidden_size:
        raise UsageError(f"feature cache {cache_dir} has width {cache.features.shape[1]}, the target "
                         f"{lm.model.config.hidden_size}: built for another model")
    meta = {"target": target, "data": str(data), "features": str(cache_dir), "dtype": dtype,
            "prompt_template": template,
            "data_sequences": len(cache), "data_tokens": int(cache.meta.get("tokens", 0)),
            "data_response_tokens": int(cache.meta.get("response_tokens", 0))}
    summary = train_heads(lm.model, cache, recipe, out, meta, resume=resume, progress=progress,
                          vocab_file=cache_dir / "vocab.safetensors")
    table = {"head": summary["label"], "params": summary["params"], "steps": summary["steps_done"],
             "tokens seen": summary["tokens_seen"], "training seconds": summary["training_seconds"],
             "total seconds": round(time.time() - t0, 1)}
    table.update({k: v for k, v in summary.items() if k.startswith("eval_top")})
    return summary, table
