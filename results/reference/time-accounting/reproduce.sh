#!/usr/bin/env bash
# Where the time goes, per method: the step split (propose, forward, accept, commit, observe,
# other), the speedup the cost model predicts next to the measured one and the oracle bound, the
# `--bc auto` prediction against the measured tokens/s, and the adaptive budget against fixed ones.
# Four quiet 2-thread float32 runs, each in one process (steps skipped when their report exists,
# and an interrupted run resumes):
#   spec-bench: the first 3 Spec-Bench questions of each category (18 questions), 128 new tokens,
#               greedy: every training-free method that needs no datastore at BC 10 (ar, pld,
#               lookahead, jacobi, tr-jacobi, recycling, samd, suffix; pld@10 again for the
#               run-to-run noise), at `adaptive` (pld, samd, suffix, recycling) and at `auto`
#               (pld, samd, suffix);
#   refine:     the 18 two-turn `refine` questions, 128 new tokens: ar, pld/samd/suffix at BC 10, auto
#               and adaptive (report: turns.md per turn);
#   spec-bench-cal128: the spec-bench questions again, ar, pld/samd/suffix at BC 10, auto and
#               adaptive, with `--auto-tokens 128`: calibration answers as long as the reported
#               ones (the default calibrates on their first 32 tokens);
#   spec-bench-cal128-repeat: the same again with pld, samd and suffix twice at BC 10 (the noise);
#   spec-bench-lambda: the adaptive budget's lambda rule against BC 10 and auto's budgets;
#   corpus: the target's own answers (AR, 128 new tokens) to 120 other Spec-Bench questions (20
#               per category, none of the first 10 per category, which hold every reported and
#               calibration question) become a datastore (corpus-datastore);
#   spec-bench-merge: samd with merged drafts (-o samd.merge=true) at BC 10, auto and adaptive
#               against samd; suffix with the corpus in its global tree against suffix; then
#               samd's static automaton over the corpus replayed offline (replay_static.py);
#   spec-bench-repeats: samd@12, samd@adaptive, suffix@16, suffix@adaptive, three passes each
#               (--repeats 3): the run-to-run noise of the adaptive budget's comparison;
#   spec-bench-hindsight: the same with the adaptive budget counting each answer's whole proposals
#               in hindsight, pld@6 and pld@adaptive added, three passes each (spec-bench-verified-only:
#               the same command run by the tool before hindsight counting, commit b0dfd26: see README);
#   spec-bench-merge-hindsight: samd@12 against samd with merged drafts at BC 10 and adaptive
#               (hindsight), two passes each;
#   temperature: the built-in `mini` suite, one question per category, 64 new tokens,
#               --temperature 0,0.7,1.0 (and --top-p 0.9 with TOP_PS="1.0 0.9"): ar, pld, recycling, samd,
#               suffix at BC 10 (#MAT per temperature).
# Run alone on the machine: the manifests record the load average and reports flag a busy run.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
OUT=${1:-results/time-accounting}
COMMON=(--threads 2 --dtype float32)
mkdir -p "$OUT"
stamp() { echo "== $1 ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
last_run() { ls -d "$1"/2*/ 2>/dev/null | tail -1; }
resume_of() { local r; r=$(last_run "$1"); [ -n "$r" ] && echo "--resume $r" || true; }
done_in() { local r; r=$(last_run "$1"); [ -n "$r" ] && [ -f "$r/report/table.md" ]; }

if ! done_in "$OUT/spec-bench"; then
  stamp "spec-bench"
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench") --tasks spec_bench --limit 3 --max-new-tokens 128 --bc 10 \
    "${COMMON[@]}" --output-dir "$OUT/spec-bench" \
    --methods ar,pld,pld@10,lookahead,jacobi,tr-jacobi,recycling,samd,suffix,pld@adaptive,samd@adaptive,suffix@adaptive,recycling@adaptive,pld@auto,samd@auto,suffix@auto
fi
if ! done_in "$OUT/refine"; then
  stamp "refine"
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/refine") --tasks refine --max-new-tokens 128 --bc 10 "${COMMON[@]}" \
    --output-dir "$OUT/refine" \
    --methods ar,pld,samd,suffix,pld@auto,samd@auto,suffix@auto,pld@adaptive,samd@adaptive,suffix@adaptive
fi
if ! done_in "$OUT/spec-bench-cal128"; then
  stamp "spec-bench-cal128"
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench-cal128") --tasks spec_bench --limit 3 --max-new-tokens 128 --bc 10 \
    --auto-tokens 128 "${COMMON[@]}" --output-dir "$OUT/spec-bench-cal128" \
    --methods ar,pld,samd,suffix,pld@auto,samd@auto,suffix@auto,pld@adaptive,samd@adaptive,suffix@adaptive
fi
if ! done_in "$OUT/spec-bench-cal128-repeat"; then
  stamp "spec-bench-cal128-repeat"
  # the cal128 command again, pld/samd/suffix each twice at BC 10 (run-to-run noise in one run)
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench-cal128-repeat") --tasks spec_bench --limit 3 --max-new-tokens 128 \
    --bc 10 --auto-tokens 128 "${COMMON[@]}" --output-dir "$OUT/spec-bench-cal128-repeat" \
    --methods ar,pld,pld@10,samd,samd@10,suffix,suffix@10,pld@auto,samd@auto,suffix@auto,pld@adaptive,samd@adaptive,suffix@adaptive
fi
if ! done_in "$OUT/spec-bench-lambda"; then
  stamp "spec-bench-lambda"
  # the adaptive budget's lambda rule against the fixed budgets auto chose in spec-bench-cal128-repeat
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench-lambda") --tasks spec_bench --limit 3 --max-new-tokens 128 \
    --bc 10 --auto-tokens 128 "${COMMON[@]}" --output-dir "$OUT/spec-bench-lambda" \
    --methods ar,pld,pld@6,samd,samd@12,suffix,suffix@16,pld@adaptive,samd@adaptive,suffix@adaptive
fi
if ! done_in "$OUT/corpus"; then
  stamp "corpus"
  # 20 questions per category past the first 10 (MT-bench's taken round-robin over its subcategories)
  IDS=$(python - <<'PY'
from specbench_cli import tasks
from specbench_cli.tasks.base import select
qs = tasks.get("spec_bench").load(None)
near = {q.id for q in select(qs, limit=10)}   # every question a --limit <= 10 run reports or calibrates on
by = {}
for q in qs:
    if q.id not in near:
        by.setdefault(q.category, {}).setdefault(q.subcategory, []).append(q.id)
ids = []
for subs in by.values():
    order = [s[i] for i in range(max(map(len, subs.values()))) for s in subs.values() if i < len(s)]
    ids += order[:20]
print(",".join(ids))
PY
)
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/corpus") --tasks spec_bench --question-ids "$IDS" --max-new-tokens 128 \
    "${COMMON[@]}" --output-dir "$OUT/corpus" --methods ar
fi
if [ ! -f "$OUT/corpus-datastore/datastore.json" ]; then
  stamp "corpus datastore"
  specbench datastore build --from "$(last_run "$OUT/corpus")samples.jsonl" --out "$OUT/corpus-datastore"
fi
if ! done_in "$OUT/spec-bench-merge"; then
  stamp "spec-bench-merge"
  DS="$OUT/corpus-datastore"
  # samd with merged drafts (chain + recycling tree) at BC 10, auto and adaptive against samd at
  # BC 10; suffix with the corpus in its global tree against suffix without it
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench-merge") --tasks spec_bench --limit 3 --max-new-tokens 128 \
    --bc 10 --auto-tokens 128 "${COMMON[@]}" --output-dir "$OUT/spec-bench-merge" \
    --methods ar,samd,samd@10,samd@auto,samd@adaptive,suffix,suffix@10 \
    -o samd@10.merge=true -o samd@auto.merge=true -o samd@adaptive.merge=true -o suffix@10.datastore="$DS"
fi
stamp "samd's static automaton over the corpus, replayed offline on spec-bench-merge's answers"
python results/reference/time-accounting/replay_static.py "$(last_run "$OUT/spec-bench-merge")samples.jsonl" \
  "$OUT/corpus-datastore"
if ! done_in "$OUT/spec-bench-repeats"; then
  stamp "spec-bench-repeats"
  # the run-to-run noise of the adaptive budget's comparison: each instance three times (--repeats 3)
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench-repeats") --tasks spec_bench --limit 3 --max-new-tokens 128 \
    --bc 10 --auto-tokens 128 "${COMMON[@]}" --repeats 3 --output-dir "$OUT/spec-bench-repeats" \
    --methods ar,samd@12,samd@adaptive,suffix@16,suffix@adaptive
fi
if ! done_in "$OUT/spec-bench-hindsight"; then
  stamp "spec-bench-hindsight"
  # the adaptive budget counting each answer's whole proposals in hindsight, against the fixed
  # budgets auto chose earlier, three passes each (--repeats 3)
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench-hindsight") --tasks spec_bench --limit 3 --max-new-tokens 128 \
    --bc 10 --auto-tokens 128 "${COMMON[@]}" --repeats 3 --output-dir "$OUT/spec-bench-hindsight" \
    --methods ar,samd@12,samd@adaptive,suffix@16,suffix@adaptive,pld@6,pld@adaptive
fi
if ! done_in "$OUT/spec-bench-merge-hindsight"; then
  stamp "spec-bench-merge-hindsight"
  # samd's merged drafts (chain + recycling tree) at BC 10 and adaptive against samd@12
  # shellcheck disable=SC2046
  specbench run $(resume_of "$OUT/spec-bench-merge-hindsight") --tasks spec_bench --limit 3 --max-new-tokens 128 \
    --bc 10 --auto-tokens 128 "${COMMON[@]}" --repeats 2 --output-dir "$OUT/spec-bench-merge-hindsight" \
    --methods ar,samd@12,samd@10,samd@adaptive -o samd@10.merge=true -o samd@adaptive.merge=true
fi
stamp "paired differences per pass, adaptive against fixed"
for RUN in spec-bench-hindsight spec-bench-merge-hindsight; do
  python results/reference/time-accounting/paired_passes.py "$(last_run "$OUT/$RUN")"
done
for TOP_P in ${TOP_PS:-1.0}; do   # TOP_PS="1.0 0.9" adds the nucleus sweep
  if ! done_in "$OUT/temperature-top-p-$TOP_P"; then
    stamp "temperature sweep, top-p $TOP_P"
    # shellcheck disable=SC2046
    specbench run $(resume_of "$OUT/temperature-top-p-$TOP_P") --tasks mini --limit 1 --max-new-tokens 64 --bc 10 \
      "${COMMON[@]}" --temperature 0,0.7,1.0 --top-p "$TOP_P" --output-dir "$OUT/temperature-top-p-$TOP_P" \
      --methods ar,pld,recycling,samd,suffix
  fi
done
stamp "done"
