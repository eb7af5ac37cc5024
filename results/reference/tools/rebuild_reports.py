"""Rebuild every report the committed reference runs feed, with the code and data of one git
commit, so two commits can be compared byte for byte:

    python results/reference/tools/rebuild_reports.py OUT_A --ref main
    python results/reference/tools/rebuild_reports.py OUT_B --ref HEAD
    diff -r OUT_A OUT_B          # no output: nothing a report shows changed

The commit is unpacked (`git archive`) into a temporary folder with the installed layout
(`methods/` and `tasks/` inside `specbench_cli/`) and imported from there, whatever is
installed. What is rebuilt, for every folder of results/reference/ that holds run folders
(folders with a manifest.json):

- `specbench report` of the folder's runs: the terminal table and table.{md,csv,tex,json}
  with every extra column;
- per run folder: `export`, `baseline` (its `created` line dropped) and `check` against it,
  and `compare` with the run folder listed before it in the same study;
- per study: `report` of all its runs together;
- the studies' own table scripts that read run folders only (heads, msn, sps, fastcot,
  bc-auto, forward, spec-bench-methods).

Plots are left out (their files carry timestamps). Paths of the temporary folder are written as
`<root>` and the output folder as `<out>`, so the two outputs differ only where a report does. Exit codes and error lines are
part of the output: a report that starts failing is a difference too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

FORMATS = ("markdown", "csv", "latex", "json")
ALL_COLUMNS = "bc,mbsu,params,alpha"


def unpack(ref: str, repo: Path, dest: Path) -> Path:
    """`ref` of `repo` as files under dest/src; returns that folder."""
    src = dest / "src"
    src.mkdir(parents=True)
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", ref], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(src, filter="data")
    return src


def installed_layout(src: Path, dest: Path) -> Path:
    """specbench_cli with methods/ and tasks/ inside it (as the wheel installs them)."""
    lib = dest / "lib"
    shutil.copytree(src / "specbench_cli", lib / "specbench_cli")
    for name in ("methods", "tasks"):
        shutil.copytree(src / name, lib / "specbench_cli" / name)
    return lib


# ----------------------------------------------------------------------------- the worker

def run_cli(args: list[str]) -> tuple[str, str, int]:
    """`specbench ARGS` in this process: (stdout, stderr, exit code)."""
    from specbench_cli.cli.main import STATE, main

    out, err = io.StringIO(), io.StringIO()
    rc = 0
    sys.argv = ["specbench", *args]
    STATE["debug"] = False
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return out.getvalue(), err.getvalue(), rc


def record(out: Path, name: str, result: tuple[str, str, int]) -> None:
    stdout, stderr, rc = result
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.txt").write_text(f"{stdout}\n--- stderr\n{stderr}\n--- exit {rc}\n")


def run_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("manifest.json") if (p.parent / "samples.jsonl").exists())


def worker(src: Path, out: Path) -> None:
    res = src / "results" / "reference"
    runs = run_folders(res)
    groups: dict[Path, list[Path]] = {}
    for r in runs:
        groups.setdefault(r.parent, []).append(r)
    for group, members in sorted(groups.items()):
        rel = group.relative_to(res)
        o = out / "report" / rel
        args = [str(m) for m in members]
        record(o, "terminal", run_cli(["report", *args, "--no-plots", "-o", str(o / "terminal")]))
        for fmt in FORMATS:
            record(o, fmt, run_cli(["report", *args, "--columns", ALL_COLUMNS, "-f", fmt, "-o", str(o / fmt),
                                    "--no-plots"]))
    studies: dict[str, list[Path]] = {}
    for r in runs:
        studies.setdefault(r.relative_to(res).parts[0], []).append(r)
    for study, members in sorted(studies.items()):
        o = out / "study" / study
        args = [str(m) for m in members]
        record(o, "terminal", run_cli(["report", *args, "--columns", ALL_COLUMNS, "--no-plots", "-o",
                                       str(o / "terminal")]))
        record(o, "json", run_cli(["report", *args, "--columns", ALL_COLUMNS, "-f", "json", "-o", str(o / "json"),
                                   "--no-plots"]))
        for a, b in zip(members, members[1:]):
            record(out / "compare" / b.relative_to(res), "compare", run_cli(["compare", str(a), str(b)]))
    for r in runs:
        o = out / "run" / r.relative_to(res)
        record(o, "export", run_cli(["export", str(r), "-o", str(o / "export")]))
        base = o / "baseline.json"
        record(o, "baseline", run_cli(["baseline", str(r), "-o", str(base)]))
        if base.exists():
            base.write_text("".join(line for line in base.read_text().splitlines(True) if '"created"' not in line))
        record(o, "check", run_cli(["check", str(r), "-b", str(base)]))
    scripts(src, res, out / "scripts")


def scripts(src: Path, res: Path, out: Path) -> None:
    """The studies' table scripts (each in its own process, from the unpacked root)."""
    out.mkdir(parents=True, exist_ok=True)

    def py(name: str, *args: str) -> None:
        p = subprocess.run([sys.executable, *args], cwd=src, capture_output=True, text=True,
                           env={**os.environ, "MPLBACKEND": "Agg"})
        (out / f"{name}.txt").write_text(f"{p.stdout}\n--- stderr\n{tail(p.stderr)}\n--- exit {p.returncode}\n")

    ref = "results/reference"
    for d in ("bc-auto", "bc-auto-lean-t2", "bc-auto-lean-t2-cal128", "bc-auto-margin", "bc-auto-suite-cal"):
        for r in run_folders(res / d):
            py(f"bc_auto_summary-{d}-{r.parent.name}", f"{ref}/bc-auto/bc_auto_summary.py", str(r))
    for d in ("ar-runs", "pld-runs"):
        py(f"forward_ar_summary-{d}", f"{ref}/forward/forward_ar_summary.py",
           *map(str, run_folders(res / "forward" / d)))
    train = f"{ref}/heads-training"
    py("heads_table-heads", f"{ref}/heads/heads_table.py", f"{ref}/heads", train, "--bf16", f"{ref}/heads-bf16")
    py("heads_table-heads-v2", f"{ref}/heads/heads_table.py", f"{ref}/heads-v2", train, "--bf16", f"{ref}/heads-v2-bf16")
    py("heads_table-koala-v2", f"{ref}/heads/heads_table.py", f"{ref}/koala-v2", train, "--bf16", f"{ref}/koala-v2-bf16")
    summary = out / "heads-training"
    shutil.copytree(res / "heads-training", summary)
    py("heads_summary", f"{ref}/heads/heads_summary.py", str(summary))
    for p in summary.rglob("*"):  # only what the script wrote is kept
        if p.is_file() and p.name != "table.md":
            p.unlink()
    msn = res / "msn"
    bc10 = {r.name.split("-")[0]: r for r in run_folders(msn / "bc10")}
    for name in ("msn1", "msn4", "msn8"):
        if "sft" in bc10 and name in bc10:
            py(f"msn_agreement-{name}", f"{ref}/msn/msn_agreement.py", str(bc10["sft"]), str(bc10[name]))
    tables = ["-o", str(out / "msn-tables")]
    for name, r in sorted(bc10.items()):
        tables += ["--eval", f"{name}={r}"]
    for d in sorted((msn / "window").iterdir()):
        tables += ["--window", f"{d.name}={d}"]
    for d in sorted(p for p in (msn / "quality").iterdir() if p.is_dir()):
        tables += ["--quality", f"{d.name}={d}"]
    py("msn_tables", f"{ref}/msn/msn_tables.py", *tables)
    for p in (out / "msn-tables").glob("*.png"):
        p.unlink()
    py("sps_table", f"{ref}/sps-table/sps_table.py", "--per-category", "--tabulate",
       *map(str, run_folders(res / "sps-table")), "--table", str(out / "sps-table.md"))
    for d in ("fastcot", "fastcot-cap96"):
        for r in run_folders(res / d):
            py(f"fastcot_table-{d}", f"{ref}/fastcot/fastcot_table.py", "table", str(r), "--out",
               str(out / f"fastcot-{d}.md"))
    for r in run_folders(res / "spec-bench-methods"):
        py(f"per_step-{r.parent.name}", f"{ref}/spec-bench-methods/per_step.py", str(r))


def tail(text: str) -> str:
    """The last lines of stderr (warnings with line numbers of library code above them are noise)."""
    return "\n".join(text.strip().splitlines()[-3:])


def normalise(out: Path, root: Path) -> None:
    """Temporary paths -> `<root>`, the output folder -> `<out>`, in every text file of `out`."""
    for p in out.rglob("*"):
        if not p.is_file():
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = text.replace(str(out), "<out>").replace(str(root), "<root>")
        if new != text:
            p.write_text(new, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="output folder (replaced)")
    ap.add_argument("--ref", default="HEAD", help="git commit, branch or tag to rebuild with (default HEAD)")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[3])
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = args.out.resolve()
    if args.worker:
        worker(args.worker, out)
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = unpack(args.ref, args.repo, root)
        lib = installed_layout(src, root)
        env = {**os.environ, "PYTHONPATH": str(lib), "COLUMNS": "200", "OMP_NUM_THREADS": "1",
               "MPLBACKEND": "Agg", "NO_COLOR": "1", "TERM": "dumb"}
        subprocess.run([sys.executable, str(Path(__file__).resolve()), str(out), "--worker", str(src)], env=env,
                       check=True)
        normalise(out, root)
    print(f"reports of {args.ref} in {out}")


if __name__ == "__main__":
    main()
