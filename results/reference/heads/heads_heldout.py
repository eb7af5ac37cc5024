"""Teacher-forced top-1/top-5 of several trained heads on the SAME held-out sequences.

The held-out accuracy in each training.json is measured on that run's own held-out split, so
heads trained on different data are not comparable through it. This scores every given head on
the held-out split of one feature cache (the split `train heads` uses: 5 %, seed 0), keeping
only sequences from index FROM on (for v2: the new prompts, which no v1 head has seen and no v2
head trained on), softmax over that cache's sub-vocabulary (vocab.safetensors, made by training
on it). float32, target from the cache's meta.

usage: python results/reference/heads/heads_heldout.py CACHE_DIR FROM HEADS_DIR... [-o OUT.md]
"""

from __future__ import annotations

import sys

import argparse
import json
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_json import write_table  # noqa: E402
from safetensors.torch import load_file

from specbench_cli.models.load import load_model
from specbench_cli.models.prompting import set_threads
from specbench_cli.training.heads.data import load_feature_cache, split_cache
from specbench_cli.methods.heads.checkpoint import load_heads
from specbench_cli.training.heads.train import score_heads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", type=Path)
    ap.add_argument("start", type=int, help="first sequence index to score (earlier ones are skipped)")
    ap.add_argument("heads", type=Path, nargs="+")
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    set_threads(1)
    cache = load_feature_cache(args.cache)
    seqs = [s for s in split_cache(cache, 0.05, 0)[1] if s >= args.start]
    lm = load_model(cache.meta["target"])
    weight = lm.model.get_output_embeddings().weight[load_file(str(args.cache / "vocab.safetensors"))["vocab"]]
    n_tok = cache.response_tokens(seqs)
    lines = [f"Held-out: {len(seqs)} sequences ({n_tok} answer tokens) of {args.cache} from index {args.start}; "
             f"softmax over its {weight.shape[0]}-token sub-vocabulary; float32.", "",
             "| heads | data (answer tok) | top-1 per head | top-5 per head |", "| --- | ---: | --- | --- |"]
    for folder in args.heads:
        head = load_heads(folder, lm.model)
        r = score_heads(head, cache, seqs, weight)
        n = getattr(head, "n_heads", 1)
        meta = json.loads((folder / "config.json").read_text()).get("specbench", {})
        lines.append(f"| {folder.name} | {meta.get('data_response_tokens', '?')} | "
                     + " / ".join(f"{r[f'eval_top1_h{i}']:.3f}" for i in range(n)) + " | "
                     + " / ".join(f"{r[f'eval_top5_h{i}']:.3f}" for i in range(n)) + " |")
    write_table(lines, args.output)


if __name__ == "__main__":
    main()
