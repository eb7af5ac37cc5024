#!/usr/bin/env bash
# Reproduces this study from a fresh clone (after the README's first command has installed specbench).
# Timings depend on the machine and on its load: run alone, and keep the uptime lines next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root: every path below is relative to it
# Drafters for sps (subclone, then KLD / TVD / TVD++ distillation), then the table.
CK=${1:-results/checkpoints/drafters}
mkdir -p "$CK"
[ -f "$CK/subclone-L4/config.json" ] || specbench train drafter subclone --layers 4 --output "$CK/subclone-L4"
[ -f "$CK/distill.jsonl" ] || specbench train drafter distill-data --output "$CK/distill.jsonl"
for loss in kld tvd tvd++; do
  name=${loss/++/pp}
  [ -f "$CK/$name/config.json" ] || specbench train drafter finetune --drafter "$CK/subclone-L4" \
    --data "$CK/distill.jsonl" --loss "$loss" --output "$CK/$name" --resume
done
python results/reference/sps-table/sps_table.py "$CK/subclone-L4" "$CK/kld" "$CK/tvd" "$CK/tvdpp" \
  --gammas 3,5 --limit 5 --max-new-tokens 128
