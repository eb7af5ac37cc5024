"""The command line in-process, and the run folders it writes."""

from __future__ import annotations

import json
import sys

from specbench_cli.cli.main import main


def cli(args, capsys):
    """Run `specbench ARGS` in-process; return (exit code, stdout, stderr)."""
    old = sys.argv
    sys.argv = ["specbench", *args]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tiny_run_args(model_dir, out_dir, *extra):
    return ["run", "--model", str(model_dir), "--methods", "ar,pld", "--limit", "1", "--categories",
            "mt_bench,qa", "--max-new-tokens", "8", "--output-dir", str(out_dir), "--threads", "1",
            "--no-report", *extra]


def only_run_dir(out_dir):
    (run,) = [p for p in out_dir.iterdir() if p.is_dir()]
    return run


def run_rows(run):
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]


def one_error_line(code: int, out: str, err: str) -> str:
    """The one `error:` line of a refused command (exit 2, no traceback; notes and warnings aside)."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("note:", "warning:"))]
    assert code == 2, f"exit {code}\nstdout: {out}\nstderr: {err}"
    assert "Traceback" not in out + err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]
