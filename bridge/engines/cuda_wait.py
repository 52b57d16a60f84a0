"""How a host thread waits for the GPU: a serving process sleeps in the driver (blocking sync) instead of spinning.

CUDA's default (`auto`) spins a core in every wait while the process has fewer active contexts than the machine has
cores. One process alone loses little to that; several serve processes sharing one GPU each spin through their
whole pass, and through the other processes' time slices too, so the host work of all of them starves (measured on
the H200: 7.4 ms of server CPU a frame served with eight processes against 2.9 with one). The flag is set on the
device's primary context through the driver API (ctypes on libcuda, so no CUDA Python package is needed) before
torch, ONNX Runtime or nvJPEG create that context; every CUDA library in the process shares it.
"""
from __future__ import annotations

import ctypes

SCHED_FLAGS = {"auto": 0x00, "spin": 0x01, "yield": 0x02, "block": 0x04}  # CU_CTX_SCHED_*
SCHED_MASK = 0x07


def _device(ordinal: int):
    """(libcuda, CUdevice) of device `ordinal` with the driver started, or (None, why not)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None, "no CUDA driver (libcuda.so.1)"
    dev = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None, f"the CUDA driver has no device {ordinal}"
    return cuda, dev


def set_cuda_wait(mode: str, ordinal: int = 0) -> str:
    """Make waits on device `ordinal` use `mode` (auto | spin | yield | block); returns what was done, in words.

    Safe on a machine without a GPU (says so). Must run before the process's first CUDA call to take effect for
    sure: once the primary context exists the driver keeps its flags (the words then say so)."""
    if mode not in SCHED_FLAGS:
        raise ValueError(f"unknown CUDA wait mode {mode!r}: use one of {', '.join(SCHED_FLAGS)}")
    cuda, dev = _device(ordinal)
    if cuda is None:
        return f"{dev}: nothing to set"
    set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
    result = set_flags(dev, SCHED_FLAGS[mode])
    if result != 0:
        return f"the CUDA driver refused the {mode} wait (CUresult {result}); waits stay as they were"
    now = current_cuda_wait(ordinal)
    return f"GPU waits: {now}" if now == mode else f"GPU waits: asked {mode}, the context has {now}"


def current_cuda_wait(ordinal: int = 0) -> str | None:
    """The wait mode device `ordinal`'s primary context has (or will be created with); None without a driver."""
    cuda, dev = _device(ordinal)
    flags, active = ctypes.c_uint(), ctypes.c_int()
    if cuda is None or cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) != 0:
        return None
    by_flag = {v: k for k, v in SCHED_FLAGS.items()}
    return by_flag.get(flags.value & SCHED_MASK, hex(flags.value & SCHED_MASK))
