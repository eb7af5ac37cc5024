#!/usr/bin/env bash
# SuffixDecoding (`suffix`) on this CPU: exactness and drafting cost against the reference
# (ArcticInference's arctic-inference), Spec-Bench, the repetitive `refine` suite per turn, and a
# hybrid with Hydra heads trained here. Steps (each skipped when its output exists, so the script
# resumes):
#   1. data and heads: the target's own greedy answers to generated prompts (none a Spec-Bench
#      question; bfloat16 generation for GEN_MINUTES) and Hydra++ heads (prefix-mlp, 4 heads,
#      HYDRA_STEPS x 4 sequences, 1 thread), as in results/reference/spec-bench-methods/; or
#      HYDRA=DIR to use heads trained already;
#   2. three quiet 2-thread float32 runs, each in one process, every method at its `--bc auto`
#      budget, 128 new tokens, greedy:
#      spec-bench: the first 3 Spec-Bench questions of each category (18 questions):
#                  ar, pld, samd, suffix, hydra;
#      refine:     the 18 two-turn `refine` questions: ar, pld, samd, suffix (report: turns.md);
#      hybrid:     the same 18 Spec-Bench questions: ar, hydra, suffix at the budget its `auto`
#                  chose in spec-bench, suffix with the Hydra fallback, samd with the Hydra fallback;
#   3. the reference: arctic-inference built from its source distribution in a venv of its own
#      (WORK/venv-arctic), then benchmarks/suffix_peers.py on random programs and on the traces of
#      the spec-bench and refine runs: identical drafts? microseconds per drafted / appended token.
# Run alone on the machine: the manifests record the load average and reports flag a busy run.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/suffix}
WORK=${WORK:-$OUT/work}
DATA=$WORK/data
PY=$(command -v python)
TORCH_SPEC=${TORCH_SPEC:-torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')}
COMMON=(--max-new-tokens "${MAX_NEW:-128}" --threads 2 --dtype float32 --bc auto)
mkdir -p "$DATA" "$OUT"
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
last_run() { ls -d "$1"/2*/ 2>/dev/null | tail -1; }
resume_of() { local r; r=$(last_run "$1"); [ -n "$r" ] && echo "--resume $r" || true; }

# 1. Hydra heads trained here (the hybrid's model drafter)
HYDRA=${HYDRA:-$WORK/heads/hydra}
if [ ! -f "$HYDRA/config.json" ]; then
  [ -s "$DATA/prompts.jsonl" ] || "$PY" -m specbench_cli.training.heads.prompts -o "$DATA/prompts.jsonl" -n 1500 --seed 1
  if [ ! -f "$DATA/answers.done" ]; then
    stamp "generation (budget ${GEN_MINUTES:-18} min)"
    rc=0
    OMP_NUM_THREADS=1 timeout "${GEN_MINUTES:-18}m" specbench train drafter distill-data --target smollm2-135m \
      --seeds "$DATA/prompts.jsonl" --temperatures 0 --max-new-tokens 128 --batch-size 24 --dtype bfloat16 \
      --threads 1 -q -o "$DATA/answers.jsonl" || rc=$?
    [ $rc = 0 ] || [ $rc = 124 ] || exit $rc   # 124: the time budget ended it (rows are kept per batch)
    touch "$DATA/answers.done"
  fi
  stamp "train hydra"
  again=(); [ -d "$HYDRA/checkpoints" ] && again=(--resume)
  specbench train heads "${again[@]}" --kind hydra --heads-count 4 --steps "${HYDRA_STEPS:-2000}" \
    --data "$DATA/answers.jsonl" --target smollm2-135m --features "$DATA/features-hydra" --batch-size 4 --lr 1e-3 \
    --autocast --threads 1 -q --out "$HYDRA"
fi

# 2. the runs
stamp "spec-bench"
# shellcheck disable=SC2046
specbench run $(resume_of "$OUT/spec-bench") --tasks spec_bench --limit 3 "${COMMON[@]}" \
  --methods ar,pld@auto,samd@auto,suffix@auto,hydra@auto -o "hydra.heads=$HYDRA" --output-dir "$OUT/spec-bench"
SPEC=$(last_run "$OUT/spec-bench")
stamp "refine"
# shellcheck disable=SC2046
specbench run $(resume_of "$OUT/refine") --tasks refine "${COMMON[@]}" \
  --methods ar,pld@auto,samd@auto,suffix@auto --output-dir "$OUT/refine"
REFINE=$(last_run "$OUT/refine")
SUFFIX_BC=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["bc_auto"]["suffix@auto"]["chosen"])' \
  "$SPEC/manifest.json")
stamp "hybrid (suffix alone at BC $SUFFIX_BC, its auto budget in spec-bench)"
# shellcheck disable=SC2046
specbench run $(resume_of "$OUT/hybrid") --tasks spec_bench --limit 3 "${COMMON[@]}" \
  --methods "ar,hydra@auto,suffix@$SUFFIX_BC,suffix@auto,samd@auto" -o "hydra.heads=$HYDRA" \
  -o suffix@auto.fallback=hydra -o "suffix@auto.heads=$HYDRA" -o samd@auto.fallback=hydra -o "samd@auto.heads=$HYDRA" \
  --output-dir "$OUT/hybrid"

# 3. the reference: exactness and drafting cost (both sides single-threaded Python calls)
VENV=$WORK/venv-arctic
if ! "$VENV/bin/python" -c 'import arctic_inference.suffix_decoding' 2>/dev/null; then
  stamp "build arctic-inference ${ARCTIC_VERSION:-0.3.0} from source"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "$TORCH_SPEC" ${PEER_PIP_ARGS:-} nanobind==2.9.2 numpy setuptools wheel ninja cmake \
    protobuf==5.29.6 grpcio-tools
  "$VENV/bin/pip" download -q --no-deps --no-binary arctic-inference "arctic-inference==${ARCTIC_VERSION:-0.3.0}" -d "$WORK/src"
  PATH="$VENV/bin:$PATH" "$VENV/bin/pip" install -q --no-deps --no-build-isolation "$WORK"/src/arctic_inference-*.tar.gz  # cmake finds the venv's Python (nanobind)
fi
SCRIPT=benchmarks/suffix_peers.py
"$PY" "$SCRIPT" random --seed 0 --count 1000 --out "$WORK/random.json"
"$PY" "$SCRIPT" trace "$SPEC" --out "$WORK/trace-spec-bench.json"
"$PY" "$SCRIPT" trace "$REFINE" --out "$WORK/trace-refine.json"
for what in random trace-spec-bench trace-refine; do
  stamp "reference comparison: $what"
  OMP_NUM_THREADS=1 "$PY" "$SCRIPT" replay --impl ours --programs "$WORK/$what.json" --out "$WORK/ours-$what.json"
  OMP_NUM_THREADS=1 "$VENV/bin/python" "$SCRIPT" replay --impl reference --programs "$WORK/$what.json" \
    --out "$WORK/reference-$what.json"
  "$PY" "$SCRIPT" compare "$WORK/ours-$what.json" "$WORK/reference-$what.json" --out "$OUT/reference-$what.md"
done
stamp "done (each run folder's report/ has table.md, and turns.md for refine)"
