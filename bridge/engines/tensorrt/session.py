"""TensorRT session (full TensorRT or TensorRT-RTX, one code path).

Load: the engine comes from the cache (built on a miss); it is checked before use (TensorRT-RTX's validity
check, then a non-null deserialize with the logger's errors read) and rebuilt once when stale or incompatible.
Run: tensor-name API, `execute_async_v3` on the session's own non-blocking CUDA stream, device buffers and
pinned host staging allocated once for the largest profile shape, optional CUDA-graph replay per input shape.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bridge.engines.base import EngineError, EngineUnavailable, TensorSpec
from bridge.engines.cache import EngineCache
from bridge.engines.gpu import probe_gpu
from bridge.engines.shipped import find_model
from bridge.engines.tensorrt import cuda_buffers as cb
from bridge.engines.tensorrt.flavour import Flavour, load_flavour
from bridge.engines.tensorrt.prepare import prepare_engine, spec_for


def require_runnable(flavour: Flavour) -> None:
    """EngineUnavailable unless this machine can execute `flavour` engines (GPU, compute capability, driver)."""
    probe = probe_gpu()
    if probe.gpu is None:
        raise EngineUnavailable(f"{flavour.name} needs an NVIDIA GPU and none is usable ({probe.reason})",
                                "use --backend onnxruntime (CPU) or openvino")
    if not flavour.runs_on(probe.gpu.compute_capability):
        supported = ", ".join(flavour.buildable_targets()) or "compute capability 7.5 and newer"
        raise EngineUnavailable(f"{flavour.name} {flavour.version} engines do not execute on "
                                f"{probe.gpu.describe()}; it runs on {supported}",
                                "use --backend onnxruntime-cuda on this GPU, or full TensorRT on data-center GPUs")
    cb.check_driver()


def _trt_dtype_to_numpy(trt, dtype) -> np.dtype:
    table = {trt.float32: np.float32, trt.float16: np.float16, trt.int32: np.int32, trt.int8: np.int8,
             trt.bool: np.bool_, trt.uint8: np.uint8}
    if hasattr(trt, "int64"):
        table[trt.int64] = np.int64
    return np.dtype(table[dtype])


class TrtSession:
    def __init__(self, model_path: str | Path, flavour_name: str = "tensorrt-rtx", *, cache_dir=None,
                 precision: str = "fp32", max_batch: int = 64, use_cuda_graphs: bool = True):
        flavour = load_flavour(flavour_name)
        require_runnable(flavour)
        self.backend_name = flavour_name
        self._flavour = flavour
        trt = flavour.trt
        model = find_model(str(model_path))
        cache = EngineCache(cache_dir)
        spec = spec_for(model, model.verified_path().read_bytes(), flavour, precision=precision, max_batch=max_batch)
        runtime = trt.Runtime(flavour.logger)
        engine = None
        for attempt in range(2):  # a bad cached engine is evicted and rebuilt once
            prepared = prepare_engine(model, flavour, cache, spec)
            problem = self._incompatibility(runtime, prepared.plan)
            if problem is None:
                flavour.logger.take()  # only this deserialize's errors below
                engine = runtime.deserialize_cuda_engine(prepared.plan)
                problem = None if engine is not None else "; ".join(flavour.logger.errors()[-2:]) or "unknown"
            if engine is not None:
                break
            cache.evict(prepared.entry)
            if attempt == 1:
                raise EngineError(f"{flavour.name} cannot load the engine it just built for {model.name} ({problem})",
                                  "use --backend onnxruntime-cuda; report the GPU and driver version")
            print(f"  cached engine for {model.name} is unusable here ({problem}); rebuilding", file=sys.stderr,
                  flush=True)
        self._engine = engine
        self._context = engine.create_execution_context()
        self._stream = cb.Stream()
        self._use_graphs = use_cuda_graphs
        self._graphs: dict[tuple, cb.CudaGraph] = {}
        self._setup_io(trt)

    def _incompatibility(self, runtime, plan: bytes) -> str | None:
        """TensorRT-RTX can say whether a plan fits this GPU before deserializing it."""
        if not hasattr(runtime, "get_engine_validity"):
            return None
        validity, diagnostics = runtime.get_engine_validity(plan)
        if validity == self._flavour.trt.EngineValidity.INVALID:
            return f"engine validity check failed (diagnostics {diagnostics})"
        return None

    def _setup_io(self, trt) -> None:
        engine, ctx = self._engine, self._context
        self.inputs, self.outputs = [], []
        self._device, self._host, self._dtypes = {}, {}, {}
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        for name in inputs:  # pin inputs at their largest shape so output sizes are the largest too
            shape = engine.get_tensor_shape(name)
            if -1 in tuple(shape):
                shape = engine.get_tensor_profile_shape(name, 0)[2]
            ctx.set_input_shape(name, tuple(shape))
        for name in names:
            dtype = _trt_dtype_to_numpy(trt, engine.get_tensor_dtype(name))
            declared = tuple(engine.get_tensor_shape(name))
            largest = tuple(ctx.get_tensor_shape(name))
            nbytes = int(np.prod(largest)) * dtype.itemsize
            self._device[name] = cb.DeviceBuffer(nbytes)
            self._host[name] = cb.PinnedBuffer(nbytes)
            self._dtypes[name] = dtype
            ctx.set_tensor_address(name, self._device[name].ptr)
            spec = TensorSpec(name, tuple("batch" if d == -1 else d for d in declared), dtype.name)
            (self.inputs if name in inputs else self.outputs).append(spec)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ctx, stream = self._context, self._stream
        for spec in self.inputs:
            array = np.ascontiguousarray(feeds[spec.name], dtype=self._dtypes[spec.name])
            if not ctx.set_input_shape(spec.name, array.shape):
                raise EngineError(f"input '{spec.name}' shape {array.shape} is outside the engine's profile",
                                  "rebuild with a larger --max-batch")
            self._host[spec.name].view(array.dtype, array.shape)[...] = array
            cb.copy_to_device(self._device[spec.name], self._host[spec.name], array.nbytes, stream)
        shape_key = tuple(tuple(feeds[s.name].shape) for s in self.inputs)
        self._execute(shape_key)
        results = {}
        for spec in self.outputs:
            shape = tuple(ctx.get_tensor_shape(spec.name))
            nbytes = int(np.prod(shape)) * self._dtypes[spec.name].itemsize
            cb.copy_to_host(self._host[spec.name], self._device[spec.name], nbytes, stream)
            results[spec.name] = self._host[spec.name].view(self._dtypes[spec.name], shape)
        stream.synchronize()
        return {name: array.copy() for name, array in results.items()}

    def _execute(self, shape_key: tuple) -> None:
        """First run of a shape executes directly (TensorRT may allocate then); later runs replay a graph."""
        launch = lambda: self._context.execute_async_v3(self._stream.handle)  # noqa: E731
        graph = self._graphs.get(shape_key)
        if graph is not None:
            graph.replay(self._stream)
            return
        if not launch():
            raise EngineError("TensorRT execute_async_v3 failed", "see the TensorRT log; use --backend onnxruntime")
        if self._use_graphs and len(self._graphs) < 8:
            try:
                self._graphs[shape_key] = cb.CudaGraph(self._stream, launch)
            except EngineUnavailable:
                self._use_graphs = False  # some engines (data-dependent shapes) cannot be captured

    def refit(self, onnx_path: str | Path) -> None:
        """Swap in new weights (e.g. a federated lip-sync adapter update) from an ONNX file with the same graph,
        without rebuilding; existing contexts keep working. Needs an engine built with refittable weights."""
        trt = self._flavour.trt
        if not self._engine.refittable:
            raise EngineError("this engine was built without refittable weights", "rebuild it (facebridge engines "
                                                                                   "build) on this GPU")
        refitter = trt.Refitter(self._engine, self._flavour.logger)
        parser_refitter = trt.OnnxParserRefitter(refitter, self._flavour.logger)
        if not parser_refitter.refit_from_file(str(onnx_path)) or not refitter.refit_cuda_engine():
            errors = "; ".join(self._flavour.logger.errors()[-2:]) or "unknown"
            raise EngineError(f"refit from {Path(onnx_path).name} failed ({errors})",
                              "the new model must have the same graph and weight names; rebuild instead")
        for graph in self._graphs.values():  # captured graphs hold the old weights' kernels: capture again
            graph.close()
        self._graphs.clear()

    def close(self) -> None:
        for graph in self._graphs.values():
            graph.close()
        for buf in [*self._device.values(), *self._host.values()]:
            buf.close()
        self._stream.close()
