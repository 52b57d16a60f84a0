"""Get a ready engine plan for a model: from the cache when valid, else converted, built and stored.

This is the one place that decides the cache key, so `engines build`, `engines verify` and the TensorRT session
agree on what "the same engine" means.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bridge.engines.base import EngineError, EngineUnavailable
from bridge.engines.cache import CacheEntry, CorruptEngine, EngineCache, sha256_bytes
from bridge.engines.gpu import probe_gpu
from bridge.engines.shipped import ShippedModel, frames_as_input, value_range_of
from bridge.engines.tensorrt.builder import (
    EngineBuildError,
    EngineSpec,
    build_plan,
    profiles_for,
    refittable_initializers,
)
from bridge.engines.tensorrt.flavour import Flavour
from bridge.engines.tensorrt.fp16 import check_parity, convert_to_fp16

log = logging.getLogger(__name__)
DEFAULT_AOT_TARGET = "sm86"  # RTX 30 series: the most common RTX card; pass --target for others


@dataclass
class Prepared:
    entry: CacheEntry
    plan: bytes
    cache_hit: bool
    seconds: float  # build time, 0 on a hit


def resolve_target(flavour: Flavour, requested: str | None) -> str:
    """The compute capability to build for: the one asked for, else this GPU's, else the AOT default."""
    if requested and requested != "current":
        return requested
    gpu = probe_gpu().gpu
    if flavour.builds_without_gpu:
        return gpu.sm if gpu else DEFAULT_AOT_TARGET
    if gpu is None:
        raise EngineUnavailable(f"{flavour.name} needs an NVIDIA GPU to build engines ({probe_gpu().reason})",
                                "use --backend tensorrt-rtx to build ahead of time, or onnxruntime to run")
    return "current"


def key_fields(flavour: Flavour, onnx_sha256: str, spec: EngineSpec) -> dict:
    gpu = probe_gpu().gpu
    if flavour.builds_without_gpu:  # TensorRT-RTX engines depend on the compute capability, not the card
        gpu_name, cc = "any", spec.target
    else:  # full TensorRT tunes for the exact card
        gpu_name, cc = (gpu.name, gpu.sm) if gpu else ("none", "none")
    return {"onnx_sha256": onnx_sha256, "flavour": flavour.name, "trt_version": flavour.version,
            "gpu": gpu_name, "compute_capability": cc, **spec.as_key_fields()}


def spec_for(model: ShippedModel, onnx_bytes: bytes, flavour: Flavour, *, precision: str = "fp32",
             target: str | None = None, opt_level: int = 3, opt_batch: int = 1, max_batch: int = 64) -> EngineSpec:
    hints = model.engine_hints
    refit = refittable_initializers(onnx_bytes, hints.get("refittable", [])) if hints.get("refittable") else ()
    return EngineSpec(precision=precision, profiles=profiles_for(onnx_bytes, opt_batch, max_batch, hints),
                      target=resolve_target(flavour, target), opt_level=opt_level, refittable=refit)


def prepare_engine(model: ShippedModel, flavour: Flavour, cache: EngineCache, spec: EngineSpec,
                   report: Callable[[str], None] | None = None) -> Prepared:
    """Return a valid plan for `model`, building (and storing) it when the cache has none."""
    report = report or (lambda line: print(f"  {line}", file=sys.stderr))
    onnx_bytes = model.verified_path().read_bytes()
    fields = key_fields(flavour, sha256_bytes(onnx_bytes), spec)
    entry = cache.get(model.name, fields)
    if entry is None and spec.refittable and probe_gpu().gpu is None:
        # a fixed-weight engine stored earlier because refittable builds need a GPU here (see below)
        entry = cache.get(model.name, key_fields(flavour, fields["onnx_sha256"], replace(spec, refittable=())))
    if entry is not None:
        try:
            return Prepared(entry, entry.read_plan(), True, 0.0)
        except CorruptEngine as e:
            report(f"{e.problem}; rebuilding")
            cache.evict(entry)
    extra: dict = {"source": str(model.path)}
    build_bytes = onnx_bytes
    if spec.precision == "fp16":
        build_bytes, extra["fp16_parity"] = _fp16_graph(model, onnx_bytes)
        cache.derived_path(model.name, fields, ".fp16.onnx").parent.mkdir(parents=True, exist_ok=True)
    elif spec.precision != "fp32":
        raise EngineError(f"unknown precision '{spec.precision}'", "use fp32 or fp16")
    report(f"building {flavour.name} {flavour.version} engine for {model.name} "
           f"({spec.precision}, {spec.target}, optimization level {spec.opt_level})")
    timing = cache.timing_cache_path(flavour.name, flavour.version, fields["compute_capability"])
    try:
        result = build_plan(flavour, build_bytes, spec, model_path=model.path, timing_cache=timing, report=report)
    except EngineBuildError as e:
        if not spec.refittable or probe_gpu().gpu is not None:
            raise
        # TensorRT-RTX 1.7 compiles refittable recurrent layers with CUDA even when building ahead of time;
        # without a GPU we build the fixed-weight engine (new adapter weights then mean a rebuild, not a refit).
        report(f"{model.name}: {flavour.name} {flavour.version} builds refittable engines only on a GPU; building "
               "it with fixed weights (a new adapter then means a rebuild, not a refit)")
        log.debug("refittable build of %s failed: %s", model.name, e.problem)
        spec = replace(spec, refittable=())
        fields = key_fields(flavour, fields["onnx_sha256"], spec)
        hit = cache.get(model.name, fields)
        if hit is not None:
            try:
                return Prepared(hit, hit.read_plan(), True, 0.0)
            except CorruptEngine:
                cache.evict(hit)
        result = build_plan(flavour, build_bytes, spec, model_path=model.path, timing_cache=timing, report=report)
        extra["refit_unavailable"] = "refittable build needs a GPU with this TensorRT version"
    extra.update(build_seconds=round(result.seconds, 3), refittable=result.refittable)
    entry = cache.put(model.name, fields, result.plan, extra)
    report(f"built {model.name} in {result.seconds:.1f} s ({len(result.plan) / 1e6:.1f} MB) -> {entry.plan_path}")
    return Prepared(entry, result.plan, False, result.seconds)


def _fp16_graph(model: ShippedModel, onnx_bytes: bytes) -> tuple[bytes, dict]:
    """FP16 ONNX graph checked against FP32 on real frames; refuses the build when outputs drift."""
    # optional extra: onnx (fed, tools), about 1.1 s to import
    import onnx

    fp16 = convert_to_fp16(onnx_bytes)
    graph = onnx.load_from_string(onnx_bytes)
    inits = {i.name for i in graph.graph.initializer}
    feeds = {}
    for value in graph.graph.input:
        if value.name in inits:
            continue
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim][1:]
        if len(dims) != 3 or 0 in dims:
            raise EngineBuildError(f"cannot check FP16 for {model.name}: input '{value.name}' is not an image",
                                   "build it with --precision fp32")
        feeds[value.name] = frames_as_input(tuple(dims), value_range_of(model.entry))
    report = check_parity(onnx_bytes, fp16, feeds)
    if not report.ok:
        raise EngineBuildError(f"FP16 {model.name} drifts {report.worst_relative:.2%} of its output range from "
                               f"FP32 on real frames (limit {report.tolerance:.0%})", "use --precision fp32")
    return fp16, report.as_dict()


def with_target(spec: EngineSpec, target: str) -> EngineSpec:
    return replace(spec, target=target)


def onnx_path_of(entry: CacheEntry) -> Path | None:
    src = entry.meta.get("source")
    return Path(src) if src else None
