"""How busy the machine was while a run was timed, recorded in its manifest.

`specbench run` records the CPU model and core count, the GPU and its driver where there is
one, and the load average: when decoding starts, the highest 1-minute value seen after each
finished row, and when it ends (a resumed run adds one record per session of decoding). A run
was *busy* when the 1-minute load average rose above its own threads plus `BUSY_MARGIN`: some
other process then shared the cores, and its timings do not compare with a quiet run's
(measured here: another 2-thread job on the 2 cores slowed runs 2-17x). Reports print a warning
for such a run and `check` refuses to judge its speed unless told `--allow-busy`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Optional

from specbench_cli.targets.hf.forward.cpuinfo import cpu_flags, cpu_model, isa_label  # noqa: F401 (re-exported)

BUSY_MARGIN = 1.0  # one core's worth: the harness's own extra work (tokenizer, progress) stays below it


def load_average() -> Optional[list[float]]:
    """[1, 5, 15]-minute load averages, or None where the OS has none (Windows)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def gpu() -> Optional[dict[str, Any]]:
    """Name and driver of CUDA device 0 when torch sees one, else None."""
    import torch

    if not torch.cuda.is_available():
        return None
    info: dict[str, Any] = {"name": torch.cuda.get_device_name(0), "cuda": torch.version.cuda, "driver": None}
    if shutil.which("nvidia-smi"):
        try:
            res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
                                 capture_output=True, text=True, timeout=10)
            info["driver"] = res.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
    return info


class LoadWatch:
    """The load average of one session of decoding: at the start, its maximum after each
    finished row, at the end."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.start = load_average()
        self.max_1min = self.start[0] if self.start else None

    def sample(self) -> None:
        now = load_average()
        if now is not None:
            self.max_1min = now[0] if self.max_1min is None else max(self.max_1min, now[0])

    def record(self, started: str, finished: str) -> dict[str, Any]:
        self.sample()
        return {"threads": self.threads, "started": started, "finished": finished, "load_start": self.start,
                "load_end": load_average(), "load_max_1min": self.max_1min}


def busy_reason(manifest: dict) -> Optional[str]:
    """Why a run's timings are not from a quiet machine ('load average up to 3.9 with 2
    threads'), or None: quiet, or not recorded (runs made before the tool recorded it)."""
    worst = None
    for rec in manifest.get("timing_conditions") or []:
        if not isinstance(rec, dict):
            continue
        threads, peak = rec.get("threads"), rec.get("load_max_1min")
        if not isinstance(threads, int) or not isinstance(peak, (int, float)) or isinstance(peak, bool):
            continue
        if peak > threads + BUSY_MARGIN and (worst is None or peak - threads > worst[0] - worst[1]):
            worst = (peak, threads)
    if worst is None:
        return None
    return f"1-minute load average up to {worst[0]:.1f} with {worst[1]} thread(s)"


def machine_line(manifest: dict) -> str:
    """'measured on <CPU> (<ISA>: flags), N threads, dtype, forward F': printed under every table,
    because speedups on a CPU depend on its instruction set (module doc of targets/hf/forward/cpuinfo.py)."""
    host = manifest.get("host") if isinstance(manifest.get("host"), dict) else {}
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    device = str(host.get("device_name") or "cpu")
    where = str(host.get("cpu_model") or "unknown CPU")
    flags = host.get("cpu_flags")
    if isinstance(flags, list) and all(isinstance(f, str) for f in flags):
        label = isa_label(flags)
        where += f" ({label}: {', '.join(flags)})" if flags else " (instruction set unknown)"
    else:
        where += " (instruction set not recorded)"
    if device != "cpu":
        where = f"{device}, host {where}"
    parts = [f"measured on {where}"]
    if isinstance(cfg.get("threads"), int):
        parts.append(f"{cfg['threads']} threads")
    if isinstance(cfg.get("dtype"), str):
        parts.append(cfg["dtype"])
    forward = model.get("forward") or cfg.get("forward")
    if isinstance(forward, str):
        kernels = model.get("kernels") if isinstance(model.get("kernels"), dict) else None
        parts.append(f"forward {forward}" + (f" (kernels {kernels.get('mode')})" if kernels else ""))
    return ", ".join(parts)
