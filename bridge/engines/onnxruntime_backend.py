"""ONNX Runtime backend: CPU, and the CUDA execution provider when onnxruntime-gpu is installed.

On the CPU provider the model is first rewritten in memory where that is exact and faster (onnx_passes.py,
onnx_twins.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from bridge.engines.base import EngineUnavailable, TensorSpec
from bridge.engines.onnx_passes import prelu_as_relu
from bridge.engines.onnx_twins import twin_passes_as_batch
from bridge.engines.rewritten import cached_rewrite, versions_of
from bridge.errors import ModelError

_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int64)": "int64",
              "tensor(int32)": "int32", "tensor(uint8)": "uint8", "tensor(double)": "float64"}


def _spec(arg) -> TensorSpec:
    return TensorSpec(arg.name, tuple(arg.shape), _ORT_TYPES.get(arg.type, arg.type))


def cuda_provider_available() -> bool:
    return "CUDAExecutionProvider" in ort.get_available_providers()


def _cpu_rewrite(original: bytes) -> dict[str, bytes] | None:
    """The exact rewrites for the CPU provider, or None when neither applies."""
    data = prelu_as_relu(original) or original
    data = twin_passes_as_batch(data) or data
    return None if data is original else {"model": data}


class OrtSession:
    backend_name = "onnxruntime"
    precision = "f32"  # the CPU provider computes float32 models in f32 (no bf16 fast math on x86)

    def __init__(self, model_path: str | Path, threads: int = 1, providers: list | None = None):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # Spinning worker threads fight the numpy glue for the cores; measured 3x slower without this.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        source: str | bytes = str(model_path)
        if providers is None:  # the CPU provider: exact rewrites of the ops it runs badly (onnx_passes.py)
            try:
                rewritten = cached_rewrite("ort-cpu", versions_of(prelu_as_relu, twin_passes_as_batch, packages=(
                    "onnx", "onnxruntime")), Path(model_path).read_bytes(), _cpu_rewrite)
                source = rewritten["model"] if rewritten else source
            except Exception:  # noqa: BLE001 - an unreadable or odd file is ONNX Runtime's to report below
                pass
        try:
            self._session = ort.InferenceSession(source, sess_options=opts,
                                                 providers=providers or ["CPUExecutionProvider"])
        except Exception as e:  # ORT raises several private exception types
            raise ModelError(f"ONNX Runtime cannot load {model_path} ({str(e).splitlines()[0][:200]})",
                             "check the file is a valid ONNX model; rebuild shipped ones with "
                             "`python tools/build_models.py`") from None
        self.inputs = [_spec(a) for a in self._session.get_inputs()]
        self.outputs = [_spec(a) for a in self._session.get_outputs()]
        self._output_names = [o.name for o in self.outputs]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._session.run(self._output_names, feeds)
        return dict(zip(self._output_names, values))


class OrtCudaSession(OrtSession):
    """ORT with the CUDA execution provider. `run` takes host arrays; `bind` gives a device-resident runner."""

    backend_name = "onnxruntime-cuda"

    def __init__(self, model_path: str | Path, threads: int = 1, device_id: int = 0, cuda_graph: bool = False):
        if not cuda_provider_available():
            raise EngineUnavailable("ONNX Runtime here has no CUDA execution provider",
                                    "pip install 'facebridge[gpu]' (onnxruntime-gpu) in place of onnxruntime")
        # use_tf32 off: ORT's CUDA provider computes convolutions in TF32 by default (10-bit mantissa), which put
        # the landmark model 0.047 off its f32 reference on an H200 and failed a release's reference check
        options = {"device_id": device_id, "cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "0",
                   "enable_cuda_graph": "1" if cuda_graph else "0"}
        super().__init__(model_path, threads, providers=[("CUDAExecutionProvider", options)])
        if "CUDAExecutionProvider" not in self._session.get_providers():
            raise EngineUnavailable("ONNX Runtime could not start its CUDA execution provider (CUDA or cuDNN "
                                    "libraries missing, or no GPU)", "check `nvidia-smi`; use --backend onnxruntime")
        self.device_id = device_id

    def bind(self, inputs: dict, outputs: dict) -> DeviceBoundRun:
        """A runner over device tensors (torch or cupy: anything with data_ptr()/data.ptr, shape, dtype)."""
        return DeviceBoundRun(self._session, inputs, outputs, self.device_id)


def _pointer(tensor) -> int:
    return int(tensor.data_ptr()) if hasattr(tensor, "data_ptr") else int(tensor.data.ptr)


def _numpy_dtype(tensor):
    dtype = tensor.dtype
    if hasattr(dtype, "itemsize") and not hasattr(tensor, "data_ptr"):
        return np.dtype(dtype)  # cupy
    return {"torch.float32": np.float32, "torch.float16": np.float16, "torch.int64": np.int64,
            "torch.int32": np.int32, "torch.uint8": np.uint8}[str(dtype)]


class DeviceBoundRun:
    """IOBinding over fixed device buffers: no host copies and no per-call allocation; with the session's
    CUDA-graph option, every call after the first replays one captured graph."""

    def __init__(self, session, inputs: dict, outputs: dict, device_id: int):
        self._session = session
        self._binding = session.io_binding()
        for kind, tensors in (("input", inputs), ("output", outputs)):
            for name, tensor in tensors.items():
                bind = self._binding.bind_input if kind == "input" else self._binding.bind_output
                bind(name, "cuda", device_id, _numpy_dtype(tensor), list(tensor.shape), _pointer(tensor))
        self._options = ort.RunOptions()

    def __call__(self) -> None:
        self._session.run_with_iobinding(self._binding, self._options)
