cd /work/wt/fwd
for f in sdpa lean; do
  echo "$f start $(date +%T) $(cat /proc/loadavg)" >> /tmp/arruns/log
  specbench run --methods ar --tasks spec_bench --questions /work/shared/data/spec_bench/question.jsonl --limit 1 --max-new-tokens 128 --threads 1 --forward $f --output-dir /tmp/arruns/$f --no-report > /tmp/arruns/$f.out 2>&1
  echo "$f end $(date +%T) $(cat /proc/loadavg) rc=$?" >> /tmp/arruns/log
done
