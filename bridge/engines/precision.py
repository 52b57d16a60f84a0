"""CPU inference precision: f32 unless asked, always set explicitly, and the precision that ran is reported.

OpenVINO's CPU plugin, left to itself, computes in bf16 on CPUs with native bf16 (AMX / AVX512-BF16: Intel Xeon
4th generation and later); there the 468 landmarks move by up to 0.8 px at the model's 192 px scale. FaceBridge
therefore always passes INFERENCE_PRECISION_HINT: "f32" by default (measured in docs/PERFORMANCE.md, "CPU
inference precision"), "bf16" only when asked (`--cpu-precision bf16`). A bf16 request on a CPU without native bf16
runs f32 (OpenVINO ignores the hint there), and ONNX Runtime's CPU provider computes f32 only; in both cases the
session says so.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from bridge.errors import FaceBridgeError

CPU_PRECISIONS = ("f32", "bf16")
DEFAULT_CPU_PRECISION = "f32"


def check_cpu_precision(precision: str) -> str:
    if precision not in CPU_PRECISIONS:
        raise FaceBridgeError(f"unknown CPU precision {precision!r}",
                              f"use --cpu-precision {' or '.join(CPU_PRECISIONS)}")
    return precision


@lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AMX-BF16 or AVX512-BF16): OpenVINO's own answer when
    OpenVINO is installed, else the kernel's CPU flags."""
    try:
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.openvino_import import import_openvino

        return "BF16" in import_openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception:  # not installed, or no CPU plugin
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def precision_note(requested: str, running: str, backend: str) -> str:
    """A few words for the backend line: the precision that runs, and why when it is not the one asked for."""
    if running == requested:
        if backend == "openvino" and running == "f32" and cpu_has_native_bf16():
            return "f32 (this CPU has native bf16: --cpu-precision bf16 is faster, less exact)"
        return running
    if backend == "openvino":
        return f"{running} (bf16 asked, but this CPU has no native bf16: no AMX or AVX512-BF16)"
    return f"{running} ({backend} computes f32 only on the CPU; --backend openvino for bf16)"
