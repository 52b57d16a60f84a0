"""Which backend to use: the fastest one that works here, with the reason, and a fallback when one fails.

Automatic order: TensorRT, TensorRT-RTX, ONNX Runtime CUDA, then the CPU backends (LiteRT, OpenVINO, ONNX Runtime
CPU), of which `auto` takes the fastest that agrees with ONNX Runtime, measured per model (fastest.py). Each
candidate is checked cheaply first (library importable, GPU present, compute capability supported); the first that
passes is tried, and if opening the model on it fails (parse error, build failure, full disk, bad engine) the next
one is.
"""
from __future__ import annotations

from dataclasses import dataclass

from bridge.engines.base import EngineUnavailable

AUTO_ORDER = ("tensorrt", "tensorrt-rtx", "onnxruntime-cuda", "litert", "openvino", "onnxruntime")
CPU_BACKENDS = ("litert", "openvino", "onnxruntime")
BACKENDS = ("auto", *AUTO_ORDER)


@dataclass(frozen=True)
class Availability:
    backend: str
    ok: bool
    reason: str  # why it is usable or not, in a few words


def check_available(backend: str) -> Availability:
    """Cheap check: can `backend` be tried on this machine?"""
    try:
        reason = _check(backend)
    except EngineUnavailable as e:
        return Availability(backend, False, e.problem)
    return Availability(backend, True, reason)


def _check(backend: str) -> str:
    if backend in ("tensorrt", "tensorrt-rtx"):
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.tensorrt.flavour import load_flavour
        from bridge.engines.tensorrt.session import require_runnable

        flavour = load_flavour(backend)
        require_runnable(flavour)
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.gpu import probe_gpu

        return f"{backend} {flavour.version} on {probe_gpu().gpu.describe()}"
    if backend == "onnxruntime-cuda":
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.gpu import probe_gpu
        from bridge.engines.onnxruntime_backend import cuda_provider_available

        if not cuda_provider_available():
            raise EngineUnavailable("onnxruntime-gpu is not installed", "pip install 'facebridge[gpu]'")
        probe = probe_gpu()
        if probe.gpu is None:
            raise EngineUnavailable(f"no usable NVIDIA GPU ({probe.reason})", "use --backend onnxruntime")
        return f"CUDA execution provider on {probe.gpu.describe()}"
    if backend == "openvino":
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.openvino_backend import openvino_available

        if not openvino_available():
            raise EngineUnavailable("openvino is not installed", "pip install 'facebridge[openvino]'")
        return "OpenVINO CPU"
    if backend == "litert":
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.litert_backend import litert_available

        if not litert_available():
            raise EngineUnavailable("ai-edge-litert is not installed", "pip install ai-edge-litert")
        return "LiteRT CPU (XNNPACK), for the models that ship their source .tflite"
    if backend == "onnxruntime":
        return "ONNX Runtime CPU, always available"
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def candidates(requested: str) -> list[str]:
    """Backends to try in order: the requested one first, then the automatic order as fallback."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    if requested == "auto":
        return list(AUTO_ORDER)
    return [requested, *(b for b in AUTO_ORDER if b != requested)]


def explain(requested: str = "auto") -> list[Availability]:
    """Every candidate with whether it can be used and why (for `facebridge engines list` and logs)."""
    return [check_available(b) for b in candidates(requested)]
