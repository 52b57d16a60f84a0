"""The two TensorRT flavours behind one code path.

Full TensorRT (`import tensorrt`, 10.x/11.x) and TensorRT-RTX (`import tensorrt_rtx_bindings`, 1.x) share the
API we use: OnnxParser, optimization profiles, timing cache, build_serialized_network, the tensor-name runtime
API and execute_async_v3. Where they differ (TensorRT-RTX builds for a chosen compute capability without a GPU,
and can check an engine's validity before loading it), the callers test for the feature, not the flavour.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from functools import cache
from types import ModuleType

from bridge.engines.base import EngineUnavailable

MODULES = {"tensorrt": "tensorrt", "tensorrt-rtx": "tensorrt_rtx_bindings"}
INSTALL_HINT = {
    "tensorrt": "install full TensorRT (`pip install tensorrt-cu12` or `tensorrt-cu13` with NVIDIA's index "
                "reachable), or use --backend tensorrt-rtx / onnxruntime-cuda",
    "tensorrt-rtx": "install it with `pip install 'facebridge[tensorrt-rtx]'` "
                    "(tensorrt-rtx-cu12-bindings + tensorrt-rtx-cu12-libs)",
}


@dataclass
class Flavour:
    name: str  # "tensorrt" | "tensorrt-rtx"
    trt: ModuleType
    logger: CapturingLogger

    @property
    def version(self) -> str:
        return self.trt.__version__

    @property
    def builds_without_gpu(self) -> bool:
        """TensorRT-RTX compiles ahead of time for a named compute capability; full TensorRT needs the GPU."""
        return hasattr(self.trt, "ComputeCapability")

    def buildable_targets(self) -> list[str]:
        """Compute capabilities an engine can be built for without the GPU, e.g. ['sm75', 'sm80', ...]."""
        if not self.builds_without_gpu:
            return []
        return sorted(n.lower() for n in self.trt.ComputeCapability.__members__ if n.startswith("SM"))

    def runs_on(self, compute_capability: tuple[int, int]) -> bool:
        """Whether engines of this flavour execute on a GPU of this compute capability."""
        if not self.builds_without_gpu:
            return compute_capability >= (7, 5)  # TensorRT 10/11 support Turing and newer
        return f"sm{compute_capability[0]}{compute_capability[1]}" in self.buildable_targets()


@cache
def load_flavour(name: str) -> Flavour:
    """Import a TensorRT flavour, or raise EngineUnavailable saying how to install it."""
    if name not in MODULES:
        raise ValueError(f"unknown TensorRT flavour {name!r}")
    try:
        trt = importlib.import_module(MODULES[name])
    except ImportError as e:
        raise EngineUnavailable(f"{name} is not installed ({e})", INSTALL_HINT[name]) from None
    except OSError as e:  # the Python bindings import but a shared library is missing or broken
        raise EngineUnavailable(f"{name} cannot load its libraries ({e})", INSTALL_HINT[name]) from None
    return Flavour(name, trt, _make_logger(trt))


def _make_logger(trt) -> CapturingLogger:
    class _Logger(trt.ILogger):
        """Keeps error text so failures (parse, build, deserialize) can be reported, not just 'None'."""

        def __init__(self):
            trt.ILogger.__init__(self)
            self._lock = threading.Lock()
            self.messages: list[str] = []

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.WARNING:
                with self._lock:
                    self.messages.append(f"{severity.name}: {msg}")
                    del self.messages[:-50]

        def take(self) -> list[str]:
            with self._lock:
                taken, self.messages = self.messages, []
            return taken

        def errors(self) -> list[str]:
            return [m for m in self.take() if not m.startswith("WARNING")]

    # TensorRT keeps one process-wide logger; make ours that one before any builder or runtime exists.
    return _Logger()


CapturingLogger = object  # the class is created per flavour module above; this name is for type hints only
