"""Writing a run folder: manifest.json and samples.jsonl (format: docs/results-format.md).

Rows are appended and flushed one by one, so an interrupted run keeps every finished row and
`--resume` can skip them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import secrets
import subprocess
from pathlib import Path
from typing import Any, Iterable, Optional

from specbench_cli.errors import UsageError

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def git_commit() -> Optional[str]:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    import torch
    import transformers

    from specbench_cli import __version__

    return {
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "specbench": __version__},
        "host": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                 "cpu_count": os.cpu_count(),
                 "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"},
        "git_commit": git_commit(),
    }


def row_key(row: dict) -> tuple:
    return (row["method"], row.get("task"), str(row["question_id"]), int(row["turn"]), int(row.get("repeat", 0)))


class RunStore:
    """A run folder open for appending."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest_path = path / MANIFEST
        self.samples_path = path / SAMPLES

    @classmethod
    def create(cls, output_dir: Path, manifest: dict) -> "RunStore":
        run_id = new_run_id()
        path = Path(output_dir) / run_id
        path.mkdir(parents=True, exist_ok=False)
        store = cls(path)
        store.write_manifest({"run_id": run_id, "created": now_iso(), "finished": None, **manifest})
        store.samples_path.touch()
        return store

    @classmethod
    def open(cls, path: Path) -> "RunStore":
        store = cls(Path(path))
        if not store.manifest_path.is_file():
            raise UsageError(f"{path} is not a run folder (no {MANIFEST})")
        return store

    def read_manifest(self) -> dict:
        from specbench_cli.results_io import read_manifest

        return read_manifest(self.manifest_path)

    def write_manifest(self, manifest: dict) -> None:
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
        tmp.replace(self.manifest_path)

    def update_manifest(self, **fields: Any) -> None:
        m = self.read_manifest()
        m.update(fields)
        self.write_manifest(m)

    def rows(self) -> list[dict]:
        """Finished rows; a torn last line (crash mid-write) is ignored, any other bad line is an error."""
        if not self.samples_path.is_file():
            return []
        lines = self.samples_path.read_text(encoding="utf-8").splitlines()
        out = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                if i == len(lines):
                    break
                raise UsageError(f"{self.samples_path}:{i}: not valid JSON") from None
        return out

    def repair_tail(self) -> None:
        """Drop a torn final line so appends start on a fresh line."""
        if not self.samples_path.is_file():
            return
        data = self.samples_path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            self.samples_path.write_bytes(data[:cut])

    def append(self, row: dict) -> None:
        with self.samples_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def append_many(self, rows: Iterable[dict]) -> None:
        for r in rows:
            self.append(r)
