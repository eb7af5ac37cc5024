#!/usr/bin/env bash
# Rebuild every report the committed reference runs feed (tables in all formats, terminal
# tables, compare, export, baseline + check, the sps table) with the code in SRC_ROOT, so two
# versions of the code can be compared byte for byte (plots are left out: their files carry
# timestamps). Render with main's code and with a branch, then
#   diff -r OUT_MAIN OUT_BRANCH     (only paths may differ)
#   bash results/reference/tools/render_reference_reports.sh SRC_ROOT RESULTS_ROOT OUT   [PY=python]
set -uo pipefail
src=$1; res=$2; out=$3
rm -rf "$out"; mkdir -p "$out"
export PYTHONPATH="$src" COLUMNS=200 OMP_NUM_THREADS=1
py=${PY:-python}
sb() { "$py" -c 'import sys; from specbench_cli.cli.main import main; sys.argv[0]="specbench"; main()' "$@"; }
sb report "$res"/bc-sweep/bc*/* --columns bc,median,agree -o "$out/bc-sweep" --no-plots > "$out/bc-sweep.stdout" 2>/dev/null
sb report "$res"/bf16-bc10/2* --columns median,agree -o "$out/bf16-bc10" --no-plots > "$out/bf16-bc10.stdout" 2>/dev/null
for f in markdown csv latex json; do sb report "$res"/bf16-bc10/2* --columns bc,mbsu,params,median,agree -f $f -o "$out/bf16-all-$f" --no-plots > "$out/bf16-all-$f.stdout" 2>/dev/null; done
sb report "$res"/sps-table/*/2* --columns bc,mbsu,params,median,agree -o "$out/sps-report" --no-plots > "$out/sps-report.stdout" 2>/dev/null
sb compare "$res"/bc-sweep/bc10/2* "$res"/bc-sweep/bc30/2* > "$out/compare.stdout" 2>/dev/null
sb export "$res"/bf16-bc10/2* -o "$out/export" > /dev/null 2>&1
sb baseline "$res"/bc-sweep/bc10/2* -o "$out/baseline.json" > /dev/null 2>&1
sed -i '/"created"/d' "$out/baseline.json"
sb check "$res"/bc-sweep/bc10/2* -b "$out/baseline.json" > "$out/check.stdout" 2>&1; echo "rc=$?" >> "$out/check.stdout"
(cd "$src" && "$py" results/reference/sps-table/sps_table.py --per-category --tabulate "$res"/sps-table/*/2* --table "$out/sps-table/table.md" > /dev/null 2>&1)
echo done
