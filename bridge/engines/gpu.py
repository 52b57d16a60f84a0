"""What NVIDIA GPU (if any) this process can use: name, compute capability, driver version.

Asked through the CUDA driver API of `cuda.bindings` when installed, else `nvidia-smi`; both are optional, so a
machine without either simply has no GPU as far as FaceBridge is concerned (and the reason says which is missing).
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class GpuInfo:
    name: str
    compute_capability: tuple[int, int]
    driver_version: str  # "580.159.04" (nvidia-smi) or "13.0" (CUDA driver API version)

    @property
    def sm(self) -> str:
        return f"sm{self.compute_capability[0]}{self.compute_capability[1]}"

    def describe(self) -> str:
        major, minor = self.compute_capability
        return f"{self.name} (compute capability {major}.{minor}, driver {self.driver_version})"


@dataclass(frozen=True)
class GpuProbe:
    gpu: GpuInfo | None
    reason: str  # why there is no usable GPU; "" when there is one


def _probe_cuda_bindings() -> GpuProbe | None:
    try:
        # optional extra: cuda-bindings (gpu, tensorrt)
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        err, = driver.cuInit(0)
    except Exception as e:  # cuda.bindings raises its own loader errors when libcuda.so is absent
        return GpuProbe(None, "no NVIDIA driver found (libcuda.so is not installed)"
                        if "driver library" in str(e) else f"the CUDA driver did not load ({str(e)[:100]})")
    if err != driver.CUresult.CUDA_SUCCESS:
        return GpuProbe(None, f"the CUDA driver did not start ({err.name})")
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return GpuProbe(None, "no CUDA device is visible")
    _, dev = driver.cuDeviceGet(0)
    _, raw_name = driver.cuDeviceGetName(256, dev)
    name = raw_name.split(b"\0", 1)[0].decode()
    attr = driver.CUdevice_attribute
    _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    _, version = driver.cuDriverGetVersion()
    return GpuProbe(GpuInfo(name, (major, minor), f"CUDA {version // 1000}.{version % 1000 // 10}"), "")


def _probe_nvidia_smi() -> GpuProbe:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return GpuProbe(None, "no NVIDIA driver found (nvidia-smi is not installed)")
    try:
        out = subprocess.run([exe, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return GpuProbe(None, f"nvidia-smi failed ({e})")
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        detail = (out.stderr or out.stdout).strip().splitlines()
        return GpuProbe(None, f"nvidia-smi found no usable GPU ({detail[0] if detail else out.returncode})")
    name, cc, driver_version = (part.strip() for part in lines[0].split(","))
    major, minor = (int(x) for x in cc.split("."))
    return GpuProbe(GpuInfo(name, (major, minor), driver_version), "")


@lru_cache(maxsize=1)
def probe_gpu() -> GpuProbe:
    """The first NVIDIA GPU, or why there is none. Cached: GPUs do not come and go while we run."""
    return _probe_cuda_bindings() or _probe_nvidia_smi()
