"""CUDA memory and streams through cuda-python (`cuda.bindings.runtime`), the way NVIDIA's TensorRT samples do.

Device buffers are allocated once, sized for the largest shape an engine accepts, and reused for every frame;
host staging buffers are pinned so copies run asynchronously on the session's own stream.
"""
from __future__ import annotations

import ctypes

import numpy as np

from bridge.engines.base import EngineUnavailable


def _cudart():
    try:
        # optional extra: cuda-bindings (gpu, tensorrt)
        from cuda.bindings import runtime
    except ImportError:
        raise EngineUnavailable("cuda-python is not installed (TensorRT sessions use it for CUDA memory)",
                                "pip install 'facebridge[gpu]' (cuda-bindings)") from None
    return runtime


def check(result):
    """Unpack a cuda-python (err, value...) tuple, raising a readable error on failure."""
    rt = _cudart()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        _, name = rt.cudaGetErrorName(err)
        raise EngineUnavailable(f"CUDA call failed: {name.decode() if isinstance(name, bytes) else name}",
                                "check the NVIDIA driver (`nvidia-smi`) or use --backend onnxruntime")
    return values[0] if len(values) == 1 else tuple(values) if values else None


def check_driver() -> None:
    """Refuse early, with the fix, when the driver is older than the CUDA runtime we were built against."""
    rt = _cudart()
    driver = check(rt.cudaDriverGetVersion())
    runtime = check(rt.cudaRuntimeGetVersion())
    if driver == 0:
        raise EngineUnavailable("no NVIDIA driver is loaded", "install the NVIDIA driver, or use --backend onnxruntime")
    if driver < runtime:
        raise EngineUnavailable(f"the NVIDIA driver supports CUDA {driver // 1000}.{driver % 1000 // 10} but this "
                                f"build needs CUDA {runtime // 1000}.{runtime % 1000 // 10}",
                                "update the NVIDIA driver, or use --backend onnxruntime")


class Stream:
    def __init__(self):
        rt = _cudart()
        self._rt = rt
        self.handle = check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))

    def synchronize(self) -> None:
        check(self._rt.cudaStreamSynchronize(self.handle))

    def close(self) -> None:
        if self.handle is not None:
            self._rt.cudaStreamDestroy(self.handle)
            self.handle = None


class DeviceBuffer:
    def __init__(self, nbytes: int):
        self._rt = _cudart()
        self.nbytes = max(int(nbytes), 1)
        self.ptr = int(check(self._rt.cudaMalloc(self.nbytes)))

    def close(self) -> None:
        if self.ptr:
            self._rt.cudaFree(self.ptr)
            self.ptr = 0


class PinnedBuffer:
    """Page-locked host memory seen as a numpy array, so H2D/D2H copies are asynchronous."""

    def __init__(self, nbytes: int):
        self._rt = _cudart()
        self.nbytes = max(int(nbytes), 1)
        self.ptr = int(check(self._rt.cudaMallocHost(self.nbytes)))

        self._raw = (ctypes.c_byte * self.nbytes).from_address(self.ptr)

    def view(self, dtype, shape) -> np.ndarray:
        count = int(np.prod(shape))
        return np.frombuffer(self._raw, dtype=dtype, count=count).reshape(shape)

    def close(self) -> None:
        if self.ptr:
            self._raw = None
            self._rt.cudaFreeHost(self.ptr)
            self.ptr = 0


def copy_to_device(dst: DeviceBuffer, src: PinnedBuffer, nbytes: int, stream: Stream) -> None:
    rt = _cudart()
    check(rt.cudaMemcpyAsync(dst.ptr, src.ptr, nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream.handle))


def copy_to_host(dst: PinnedBuffer, src: DeviceBuffer, nbytes: int, stream: Stream) -> None:
    rt = _cudart()
    check(rt.cudaMemcpyAsync(dst.ptr, src.ptr, nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream.handle))


class CudaGraph:
    """Capture of one steady-state launch sequence on a stream, replayed with a single launch."""

    def __init__(self, stream: Stream, launch):
        rt = _cudart()
        self._rt = rt
        check(rt.cudaStreamBeginCapture(stream.handle, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        try:
            launch()
        finally:
            graph = check(rt.cudaStreamEndCapture(stream.handle))
        self._graph = graph
        self._exec = check(rt.cudaGraphInstantiate(graph, 0))

    def replay(self, stream: Stream) -> None:
        check(self._rt.cudaGraphLaunch(self._exec, stream.handle))

    def close(self) -> None:
        self._rt.cudaGraphExecDestroy(self._exec)
        self._rt.cudaGraphDestroy(self._graph)
