"""A PNG of the answer viewer of report.html, as the README shows it: headless Chromium (the
DevTools-pipe driver of the test suite, tests/helpers/browser.py), one question, every method.

    python screenshot.py report.html viewer.png [QUESTION_INDEX] [WIDTH]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from helpers.browser import Browser, find_chromium  # noqa: E402


def main() -> None:
    page, png = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    question = sys.argv[3] if len(sys.argv) > 3 else "0"
    width = int(sys.argv[4]) if len(sys.argv) > 4 else 1100
    binary = find_chromium()
    if binary is None:
        raise SystemExit("no chromium on PATH (apt-get install chromium)")
    with Browser(binary, width=width, height=900) as browser:
        browser.open(f"{page.as_uri()}#q={question}")
        if browser.errors():
            raise SystemExit(f"the page logged errors: {browser.errors()}")
        # hover one accepted draft token, so the picture shows what hovering tells
        browser.evaluate("""(() => { const t = document.querySelectorAll('#answers span.tok.d')[12]
            || document.querySelector('#answers span.tok.d');
            if (t) t.dispatchEvent(new MouseEvent('mouseover', {bubbles: true})); })()""")
        browser.screenshot(png, "#viewer")
    print(f"wrote {png} ({png.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
