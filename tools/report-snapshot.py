"""Render every committed run folder's reports into OUT, one sub-folder per run folder: the
terminal table with every extra column, the figures, every table format and the HTML page.

Two snapshots, made with two versions of specbench, compare with `diff -r BEFORE AFTER`: a change
that must not alter any report shows no difference. It runs in one process (the report command
is called as a function), with the `specbench_cli` the interpreter imports. Matplotlib is told
to write no dates and SVG ids from specbench's salt, as specbench's figures ask for since they do,
so that an older version, whose figures carried their rendering time, compares too, and each folder is rendered in a scratch folder
of the same name length in every snapshot, so wrapped paths in what is printed match.

    python tools/report-snapshot.py OUT [RESULTS_DIR]
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path


def _report(args: list[str]) -> tuple[int, str, str]:
    from specbench_cli.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["specbench", "report", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    src = Path(sys.argv[2] if len(sys.argv) == 3 else "results/reference")
    os.environ.update(COLUMNS="120", TERM="dumb", NO_COLOR="1")
    import matplotlib
    from matplotlib.figure import Figure

    # what specbench's own figures ask for (report/plots.py: no dates, SVG ids from its salt), given
    # to a version that did not ask, so that versions before and after that change compare
    matplotlib.rcParams["svg.hashsalt"] = "specbench"
    savefig = Figure.savefig

    def undated(self, fname, *args, **kwargs):
        kind = kwargs.get("format") or str(fname).rsplit(".", 1)[-1]
        kwargs.setdefault("metadata", {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(kind, {}))
        return savefig(self, fname, *args, **kwargs)

    Figure.savefig = undated
    scratch = Path(tempfile.mkdtemp(prefix="snapshot-"))
    runs = sorted(p.parent for p in src.rglob("manifest.json") if not any(s.startswith(".") for s in p.parts))
    for i, run in enumerate(runs, 1):
        final = out / run.relative_to(src)
        dest = scratch / "run"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        logs = []
        for name, args in (("default", [str(run), "-o", str(dest / "default"), "--columns", "bc,mbsu,params,alpha"]),
                           ("html", [str(run), "--html", "-o", str(dest / "page.html")])):
            code, stdout, stderr = _report(args)
            logs.append(f"== {name}: exit {code}\n{stdout}\n-- stderr\n{stderr.replace(str(dest), 'DEST')}\n")
        (dest / "printed.txt").write_text("".join(logs))
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)
        shutil.move(str(dest), str(final))
        print(f"[{i}/{len(runs)}] {run}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
