#!/usr/bin/env bash
# Render every committed run folder's reports (terminal table, plots, every table format, the
# HTML page) into OUT, one sub-folder per run folder, with the `specbench` on PATH (or $SPECBENCH).
# Two snapshots made before and after a change compare with `diff -r BEFORE AFTER`: a change
# that must not alter any report shows no difference.
#   usage: tools/report-snapshot.sh OUT [RESULTS_DIR]
set -uo pipefail
out="${1:?usage: tools/report-snapshot.sh OUT [RESULTS_DIR]}"
src="${2:-results/reference}"
sb="${SPECBENCH:-specbench}"
mkdir -p "$out"
export COLUMNS=120 TERM=dumb NO_COLOR=1 SPECBENCH_CACHE="${SPECBENCH_CACHE:-$out/.cache}"
n=0
while IFS= read -r manifest; do
  run="$(dirname "$manifest")"
  dest="$out/${run#"$src"/}"
  mkdir -p "$dest"
  "$sb" report "$run" -o "$dest/default" --columns bc,mbsu,params,alpha >"$dest/terminal.txt" 2>"$dest/stderr.txt"
  echo "exit $?" >>"$dest/terminal.txt"
  for fmt in markdown csv latex json; do
    "$sb" report "$run" -f "$fmt" -o "$dest/$fmt" --no-plots >"$dest/$fmt.txt" 2>>"$dest/stderr.txt"
    echo "exit $?" >>"$dest/$fmt.txt"
  done
  "$sb" report "$run" --html -o "$dest/page.html" >/dev/null 2>>"$dest/stderr.txt"
  n=$((n + 1))
done < <(find "$src" -name manifest.json -not -path '*/.*' | sort)
echo "rendered $n run folders into $out"
