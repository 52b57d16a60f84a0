"""Check cached engines without trusting them: intact, current, and loadable with what is installed here."""
from __future__ import annotations

from pathlib import Path

from bridge.engines.base import EngineUnavailable
from bridge.engines.cache import CacheEntry, CorruptEngine, EngineCache, sha256_bytes
from bridge.engines.gpu import probe_gpu
from bridge.engines.tensorrt.flavour import load_flavour


def check_entry(entry: CacheEntry) -> str:
    """'ok', or what is wrong with the entry, in a few words."""
    if entry.meta.get("broken_metadata"):
        return "corrupt: metadata unreadable"
    try:
        plan = entry.read_plan()
    except CorruptEngine as e:
        return f"corrupt: {e.problem}"
    fields = entry.fields
    source = Path(entry.meta.get("source", ""))
    try:
        if sha256_bytes(source.read_bytes()) != fields.get("onnx_sha256"):
            return f"stale: {source.name} changed since the engine was built"
    except OSError:
        return f"stale: source model {source} is gone"
    try:
        flavour = load_flavour(fields.get("flavour", ""))
    except (EngineUnavailable, ValueError) as e:
        return f"unusable: {getattr(e, 'problem', e)}"
    if fields.get("trt_version") != flavour.version:
        return f"other version: built with {flavour.name} {fields.get('trt_version')}, installed {flavour.version}"
    gpu = probe_gpu().gpu
    if gpu is None:
        return "ok"  # intact and current; whether it executes can only be checked on its GPU
    if fields.get("compute_capability") not in (gpu.sm, "current"):
        return f"other GPU: built for {fields.get('compute_capability')}, this GPU is {gpu.sm}"
    runtime = flavour.trt.Runtime(flavour.logger)
    if hasattr(runtime, "get_engine_validity"):
        validity, _ = runtime.get_engine_validity(plan)
        if validity == flavour.trt.EngineValidity.INVALID:
            return "incompatible: TensorRT's validity check rejects it on this GPU"
    return "ok"


def verify_cache(cache_dir=None) -> list[tuple[CacheEntry, str]]:
    cache = EngineCache(cache_dir)
    return [(entry, check_entry(entry)) for entry in cache.entries()]
