#!/usr/bin/env bash
# Second data set for the draft heads ("v2"): varied Spec-Bench-like prompts
# (specbench_cli/training/heads/prompts.py, none a Spec-Bench question), the target's own greedy
# answers generated for a fixed time budget, their features, merged with the first data set's
# feature cache (results/reference/heads/train_heads.sh, 302 prompts) so the v2 heads see both.
#   usage: results/reference/heads/heads_data_v2.sh
#   env:   HEADS_OUT (results/checkpoints/heads), PROMPTS (1500), GEN_MINUTES (22: generation stops there;
#          rows are written per batch, re-running resumes), GEN_MAX_NEW (128), GEN_DTYPE and
#          FEAT_DTYPE (bfloat16: ~2x faster target forwards on this CPU; answers are then the
#          bfloat16 target's greedy answers, features the bfloat16 target's states)
# Writes $HEADS_OUT/data/v2-prompts.jsonl, v2-answers.jsonl, v2-answers.jsonl.features/ and
# v2.features/ (old + new cache; train with `results/reference/heads/train_heads.sh eagle-k1-v2 ...`).
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
OUT=${HEADS_OUT:-results/checkpoints/heads}/data
mkdir -p "$OUT"
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }

[ -f "$OUT/v2-prompts.jsonl" ] || python -m specbench_cli.training.heads.prompts -o "$OUT/v2-prompts.jsonl" \
  -n "${PROMPTS:-1500}" --seed 1 || exit 1
if [ ! -d "$OUT/v2-answers.jsonl.features" ] && [ "${SKIP_GEN:-0}" != 1 ]; then
  stamp "generation (budget ${GEN_MINUTES:-22} min)"
  timeout "${GEN_MINUTES:-22}m" specbench train drafter distill-data --target smollm2-135m \
    --seeds "$OUT/v2-prompts.jsonl" --temperatures 0 --max-new-tokens "${GEN_MAX_NEW:-128}" --batch-size 24 \
    --dtype "${GEN_DTYPE:-bfloat16}" --threads 1 -q -o "$OUT/v2-answers.jsonl"
  rc=$?; [ $rc = 0 ] || [ $rc = 124 ] || exit $rc   # 124: the time budget ended it
  stamp "generation stopped: $(wc -l < "$OUT/v2-answers.jsonl") answers"
fi
python - "$OUT" "${FEAT_DTYPE:-bfloat16}" <<'PY' || exit 1
import sys, time
from pathlib import Path
from specbench_cli.models.load import load_model
from specbench_cli.models.prompting import set_threads
from specbench_cli.training.heads.pipeline import _rows_target
from specbench_cli.training.heads.data import FEATURES_FILE, build_feature_cache, merge_feature_caches

out, dtype = Path(sys.argv[1]), sys.argv[2]
set_threads(1)
new = out / "v2-answers.jsonl.features"
if not (new / FEATURES_FILE).is_file():
    rows, target = _rows_target(out / "v2-answers.jsonl")
    lm = load_model(target, dtype=dtype)
    c = build_feature_cache(lm.model, lm.tokenizer, rows, new, max_len=384,
                            meta={"target": target, "data": str(out / "v2-answers.jsonl"), "rows": len(rows), "dtype": dtype})
    print(f"features: {c.meta['sequences']} sequences, {c.meta['tokens']} tokens, {c.meta['seconds']} s")
m = merge_feature_caches([out / "selfdistill.jsonl.features", new], out / "v2.features")
print(f"v2.features: {m.meta['sequences']} sequences, {m.meta['tokens']} tokens, {m.meta['response_tokens']} answer tokens")
PY
stamp done
