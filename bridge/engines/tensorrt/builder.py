"""Build a TensorRT engine from an ONNX model: parse (errors by node), profiles, timing cache, REFIT, progress.

The same code builds with full TensorRT and with TensorRT-RTX (see trt_flavour.py). What to build is an
`EngineSpec`; its fields are exactly what, besides the ONNX bytes and the TensorRT version, decides the engine,
so the cache keys on them.
"""
from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bridge.console import was_interrupted
from bridge.engines.base import EngineBuildError, EngineUnavailable
from bridge.engines.native_output import native_stderr
from bridge.engines.tensorrt.flavour import Flavour
from bridge.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)

Profile = tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # input name, min, opt, max

# Batch sizes the pipeline uses: one face per camera (1) up to many streams batched on a server.
DEFAULT_OPT_BATCH = 1
DEFAULT_MAX_BATCH = 64


@dataclass(frozen=True)
class EngineSpec:
    precision: str = "fp32"  # "fp32" | "fp16" (FP16 = converted ONNX graph, see fp16.py)
    profiles: tuple[Profile, ...] = ()
    target: str = "current"  # "current" (the GPU here) or an ahead-of-time compute capability, e.g. "sm86"
    opt_level: int = 3  # builder optimization level: 0 builds fastest, 5 searches longest
    refittable: tuple[str, ...] = ()  # initializer names whose weights can be refitted in place

    def as_key_fields(self) -> dict:
        d = asdict(self)
        d["profiles"] = [[name, list(lo), list(opt), list(hi)] for name, lo, opt, hi in self.profiles]
        d["refittable"] = list(self.refittable)
        return d


@dataclass
class BuildResult:
    plan: bytes
    seconds: float
    refittable: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# Unknown dynamic axes (e.g. a sequence length) get this range unless the manifest gives engine.profiles.
OTHER_AXIS_RANGE = (1, 64, 1024)


def _dims(value) -> list:
    """Axis sizes: int, or the symbolic name (str), or None when unnamed."""
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value.type.tensor_type.shape.dim]


def profiles_for(onnx_bytes: bytes, opt_batch: int = DEFAULT_OPT_BATCH, max_batch: int = DEFAULT_MAX_BATCH,
                 hints: dict | None = None) -> tuple[Profile, ...]:
    """One optimization profile for every dynamic input.

    A batch axis (the leading axis, or any axis sharing its symbolic name, like a recurrent state's) covers
    1..max_batch; other dynamic axes take the model manifest's engine.profiles {input: [min, opt, max]} when
    given, else OTHER_AXIS_RANGE.
    """
    # optional extra: onnx (fed, tools), about 1.1 s to import
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    given = (hints or {}).get("profiles", {})
    batch_names = {d[0] for d in map(_dims, inputs) if d and isinstance(d[0], str)}
    profiles = []
    for value in inputs:
        dims = _dims(value)
        if value.name in given:
            lo, opt, hi = (tuple(int(d) for d in dims) for dims in given[value.name])
            profiles.append((value.name, lo, opt, hi))
            continue
        if all(isinstance(d, int) and d > 0 for d in dims):
            continue  # static input: no profile entry needed
        lo, opt, hi = [], [], []
        for axis, d in enumerate(dims):
            if isinstance(d, int) and d > 0:
                ranges = (d, d, d)
            elif d in batch_names or (axis == 0 and d is None):
                ranges = (1, min(opt_batch, max_batch), max_batch)
            else:
                ranges = OTHER_AXIS_RANGE
            for out, size in zip((lo, opt, hi), ranges):
                out.append(size)
        profiles.append((value.name, tuple(lo), tuple(opt), tuple(hi)))
    return tuple(profiles)


def refittable_initializers(onnx_bytes: bytes, patterns: list[str]) -> tuple[str, ...]:
    """Initializer names matching any glob in `patterns` (e.g. the lip-sync adapter's 'adapter.*')."""
    # optional extra: onnx (fed, tools), about 1.1 s to import
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    names = [i.name for i in model.graph.initializer]
    return tuple(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns))


def _progress_monitor(trt, report: Callable[[str], None]):
    class Progress(trt.IProgressMonitor):
        """Prints TensorRT's top-level build phases (the nested ones are too chatty for a terminal)."""

        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self.depth: dict[str, int] = {}

        def phase_start(self, phase_name, parent_phase, num_steps):
            self.depth[phase_name] = self.depth.get(parent_phase, -1) + 1 if parent_phase else 0
            if self.depth[phase_name] <= 1:
                report(f"{'  ' * self.depth[phase_name]}{phase_name} ({num_steps} steps)")

        def step_complete(self, phase_name, step):
            return not was_interrupted()  # Ctrl-C cancels the build (the signal lands while TensorRT runs)

        def phase_finish(self, phase_name):
            self.depth.pop(phase_name, None)

    return Progress()


def parse_onnx(flavour: Flavour, onnx_bytes: bytes, model_path: Path | None, builder):
    """Parse into a strongly typed network. Every parser error is reported with its node."""
    trt = flavour.trt
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, flavour.logger)
    flavour.logger.take()
    path_arg = str(model_path) if model_path else None
    if not parser.parse(onnx_bytes, path_arg):
        problems = []
        for i in range(parser.num_errors):
            e = parser.get_error(i)
            where = f"node {e.node()} '{e.node_name()}' ({e.node_operator()})" if e.node() >= 0 else "model"
            code = getattr(e.code(), "name", str(e.code()))
            problems.append(f"{where}: {e.desc()} [{code}]")
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        name = model_path.name if model_path else "the model"
        raise EngineBuildError(f"{flavour.name} cannot parse {name}: {shown or 'unknown parser error'}",
                               "fix or re-export the model (opset 11-21, no custom ops); "
                               "it still runs with --backend onnxruntime")
    return network, parser


def build_plan(flavour: Flavour, onnx_bytes: bytes, spec: EngineSpec, *, model_path: Path | None = None,
               timing_cache: Path | None = None, report: Callable[[str], None] = lambda s: None) -> BuildResult:
    """Parse and build one serialized engine ('plan'). Raises EngineBuildError with TensorRT's own words."""
    trt = flavour.trt
    started = time.perf_counter()
    builder = trt.Builder(flavour.logger)
    network, _parser = parse_onnx(flavour, onnx_bytes, model_path, builder)
    config = builder.create_builder_config()
    config.builder_optimization_level = spec.opt_level
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
    if spec.target != "current":
        if not flavour.builds_without_gpu:
            raise EngineUnavailable(f"{flavour.name} builds only for the GPU it runs on, not for {spec.target}",
                                    "build on the target machine, or use TensorRT-RTX for ahead-of-time builds")
        if spec.target not in flavour.buildable_targets():
            raise EngineBuildError(f"{flavour.name} {flavour.version} cannot build for {spec.target}",
                                   f"choose one of {', '.join(flavour.buildable_targets())}")
        config.num_compute_capabilities = 1
        config.set_compute_capability(getattr(trt.ComputeCapability, spec.target.upper()), 0)
    if spec.profiles:  # one profile holds every dynamic input
        profile = builder.create_optimization_profile()
        for name, lo, opt, hi in spec.profiles:
            profile.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(profile)
    marked = _mark_refittable(trt, network, config, spec.refittable)
    # TensorRT-RTX (1.2+) made timing caches no-ops: it picks kernels when the engine first runs on the GPU.
    if flavour.builds_without_gpu:
        timing_cache = None
    cache = _load_timing_cache(config, timing_cache)
    config.progress_monitor = _progress_monitor(trt, report)
    flavour.logger.take()
    with native_stderr() as native:  # TensorRT prints some failures itself; they go into our error instead
        serialized = builder.build_serialized_network(network, config)
    for line in native:
        log.debug("%s (native): %s", flavour.name, line)
    if serialized is None and was_interrupted():
        raise KeyboardInterrupt  # the build was cancelled by Ctrl-C, not failed
    if serialized is None:
        errors = flavour.logger.errors() or ["no error text from TensorRT"]
        said = f" ({native[-1].strip()[:160]})" if native else ""
        raise EngineBuildError(f"{flavour.name} could not build {model_path.name if model_path else 'the model'}: "
                               f"{errors[-1][:300]}{said}", "it still runs with --backend onnxruntime; "
                                                            "report the model and TensorRT version")
    warnings = [m for m in flavour.logger.take() if m.startswith("WARNING")]
    if cache is not None and timing_cache is not None:
        _save_timing_cache(config, timing_cache, warnings)
    plan = memoryview(serialized).tobytes()
    return BuildResult(plan, time.perf_counter() - started, marked, warnings)


def _mark_refittable(trt, network, config, names: tuple[str, ...]) -> list[str]:
    """REFIT_INDIVIDUAL keeps every other layer's fusions; only the named weights stay swappable."""
    if not names:
        return []
    config.set_flag(trt.BuilderFlag.REFIT_INDIVIDUAL)
    marked, missing = [], []
    for name in names:
        (marked if network.mark_weights_refittable(name) else missing).append(name)
    if missing:
        raise EngineBuildError(f"weights {', '.join(missing[:5])} cannot be made refittable (TensorRT folded "
                               f"them or they are not weights)", "keep adapter weights as plain initializers "
                                                                  "of MatMul/Conv/Gemm nodes")
    return marked


def _load_timing_cache(config, path: Path | None):
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = b""
    except OSError:
        data = b""
    cache = config.create_timing_cache(data)
    if cache is None or not config.set_timing_cache(cache, ignore_mismatch=False):
        cache = config.create_timing_cache(b"")  # another device's or a corrupt cache: start afresh
        config.set_timing_cache(cache, ignore_mismatch=False)
    return cache


def _save_timing_cache(config, path: Path, warnings: list[str]) -> None:
    try:
        atomic_write_bytes(path, memoryview(config.get_timing_cache().serialize()).tobytes())
    except OSError as e:  # the engine is still good; only the next build is slower
        warnings.append(f"WARNING: timing cache not saved to {path} ({e.strerror})")
