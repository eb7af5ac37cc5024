#!/usr/bin/env bash
# The example of `specbench report --html`: a small run (ar and pld on the built-in mini suite, one
# question per category, 32 new tokens), its HTML report, and the README's picture of the answer
# viewer (headless Chromium: apt-get install chromium). The run's timings are those of whatever
# machine makes it; the page is an example of the report, not a measurement.
set -euo pipefail
cd "$(dirname "$0")"
if ! ls runs/*/manifest.json >/dev/null 2>&1; then
  specbench run --tasks mini --methods ar,pld --limit 1 --max-new-tokens 32 --output-dir runs --no-report
fi
run=$(ls -d runs/*/ | head -n 1)
sed -i "s|\"resolved\": \"$HOME/|\"resolved\": \"~/|" "$run/manifest.json"   # no home folder in a committed file
specbench report "$run" --html -o report.html
python screenshot.py report.html viewer.png 0
