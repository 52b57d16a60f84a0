"""Whether a release fits this device: same model contract, the base model it was trained for, hardware it
was built for, and the TensorRT major version it was validated with (only where TensorRT is installed).

A release that does not fit is refused as `incompatible` before anything is downloaded beyond its bundle.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import metadata

from bridge.engines.gpu import probe_gpu
from bridge.models.registry import ShippedModel
from bridge.updates import reasons
from bridge.updates.bundle import Bundle

TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu12", "tensorrt-rtx-cu12-bindings")


@lru_cache(maxsize=1)
def device_targets() -> frozenset[str]:
    """Hardware targets this device offers: always "cpu"; "cuda" and "smXY" where an NVIDIA GPU is usable."""
    found = {"cpu"}
    gpu = probe_gpu().gpu
    if gpu is not None:
        found |= {"cuda", gpu.sm}
    return frozenset(found)


@lru_cache(maxsize=1)
def tensorrt_major() -> int | None:
    """Major version of the installed TensorRT (None when none is installed)."""
    for name in TENSORRT_DISTRIBUTIONS:
        try:
            return int(metadata.version(name).split(".")[0])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return None


def check_compatible(bundle: Bundle, shipped: ShippedModel) -> None:
    """Incompatible unless `bundle` can run on this device in place of (or on top of) `shipped`."""
    what = f"release {bundle.release} of {bundle.model}"
    if bundle.contract != shipped.contract:
        raise reasons.Incompatible(f"{what} speaks model contract {bundle.contract}, this FaceBridge speaks "
                                   f"{shipped.contract}", "update FaceBridge, or publish for its contract")
    if bundle.kind == "adapter":
        if not shipped.entry.get("adapter_initializers"):
            raise reasons.Incompatible(f"{what} is an adapter, but {bundle.model} has no adapter to replace")
        if bundle.base_sha256 != shipped.sha256:
            raise reasons.Incompatible(f"{what} was trained for base model {bundle.base_sha256[:12]}, this device "
                                       f"has {shipped.sha256[:12]}", "publish an adapter trained on this base model")
    if "any" not in bundle.hardware and not set(bundle.hardware) & {"cpu"}:
        # only query the GPU when the release does not run everywhere
        if not set(bundle.hardware) & device_targets():
            raise reasons.Incompatible(f"{what} is built for {', '.join(bundle.hardware)}, this device offers "
                                       f"{', '.join(sorted(device_targets()))}")
    have = tensorrt_major()
    if bundle.tensorrt_major is not None and have is not None and have != bundle.tensorrt_major:
        raise reasons.Incompatible(f"{what} was validated with TensorRT {bundle.tensorrt_major}, this device has "
                                   f"TensorRT {have}", "publish a release validated with this TensorRT")
