"""What the CPU can do: the instruction-set flags that decide which kernels are fast.

Speedups of speculative methods on a CPU depend on the instruction set more than on anything
else (a 10-token forward cost 1.3x a 1-token one on an AVX-512 VM and 2.2x on an AVX2 one), so
manifests record these flags next to the CPU model, kernel plans are keyed by them and reports
print them under the table. No torch import: reports read this too.
"""

from __future__ import annotations

import platform

# The flags that matter for matrix products, in the order reports print them.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
             "amx_fp16", "amx_int8", "asimd", "sve", "sve2")


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere what `platform` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(path: str = "/proc/cpuinfo") -> list[str]:
    """The ISA_FLAGS this CPU reports (Linux /proc/cpuinfo; [] where it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key = line.split(":", 1)[0].strip().lower()
                if key in ("flags", "features"):
                    have = set(line.split(":", 1)[1].split())
                    return [flag for flag in ISA_FLAGS if flag in have]
    except OSError:
        pass
    return []


def isa_label(flags: list[str] | None) -> str:
    """A short name of the widest vector unit: 'AMX', 'AVX-512', 'AVX2', 'NEON', ... ('' unknown)."""
    flags = flags or []
    if "amx_tile" in flags:
        return "AVX-512+AMX"
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    if "sve" in flags or "asimd" in flags:
        return "ARM SVE" if "sve" in flags else "ARM NEON"
    return platform.machine() if not flags else ""
